# Writes OUT (#define LOOPLM_COMMIT "...") with the git commit the sources are at ("" outside a git
# clone; "-dirty" when tracked files differ from it), rewriting it only when that changed, so that a
# build with the same commit compiles nothing again. Run at every build (CMakeLists.txt).
execute_process(COMMAND git -C "${SRC_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  set(commit "")
else()
  execute_process(COMMAND git -C "${SRC_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT changes STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "#define LOOPLM_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
