/* omp.h for the fuzz build (LOOPLM_FUZZ, top-level CMakeLists.txt): the library is compiled there
 * without -fopenmp and its omp_* calls link GCC's libgomp. GCC's own omp.h does not compile with
 * clang (GCC 11+ attribute syntax) and clang's comes with libomp, a different runtime; these are
 * the OpenMP API's runtime routines with their standard C signatures, which libgomp exports. A
 * library file calling a routine not listed here fails to compile in the fuzz build: add it. */
#ifndef LOOPLM_FUZZ_OMP_H
#define LOOPLM_FUZZ_OMP_H

#ifdef __cplusplus
extern "C" {
#endif

void omp_set_num_threads(int);
int omp_get_num_threads(void);
int omp_get_max_threads(void);
int omp_get_thread_num(void);
int omp_get_num_procs(void);
int omp_in_parallel(void);
void omp_set_dynamic(int);
int omp_get_dynamic(void);
int omp_get_thread_limit(void);
int omp_get_level(void);
int omp_get_active_level(void);
double omp_get_wtime(void);
double omp_get_wtick(void);

#ifdef __cplusplus
}
#endif

#endif
