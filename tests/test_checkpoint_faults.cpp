// The checkpoint protocol under faults (train/checkpoint.h, docs/format.md): the writer killed at
// every point of a commit, a full disk (injected, and a real small tmpfs where the machine lets the
// test mount one), a read-only directory, damaged or mismatched files, a second trainer. In every
// case the last committed checkpoint survives, and --resume is bit-exact (the final weights equal
// a straight run's, byte for byte) or refused with exit 1 and nothing changed.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "test_util.h"

using namespace looplm;
namespace fs = std::filesystem;

namespace {

using looplm::test::CmdResult;
CmdResult sh(const std::string& cmd) { return looplm::test::run_shell(cmd); }

std::string bin() { return LOOPLM_BINARY; }

// Every file under `dir` (relative path -> contents), the lock file aside.
std::map<std::string, std::string> snapshot_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().filename() != "train.lock")
      out[fs::relative(e.path(), dir).string()] = io::read_file(e.path().string());
  return out;
}

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  for (auto& [k, v] : snapshot_files(dir)) out.insert(k);
  return out;
}

class Checkpoint : public ::testing::Test {
 protected:
  std::string dir;
  std::string args;  // a tiny run: checkpoints at steps 2, 4 and 6
  void SetUp() override {
    dir = (fs::temp_directory_path() / ("looplm_test_ckpt_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string text, val;
    for (int i = 0; i < 300; ++i) text += "In the beginning God created the heaven and the earth. " + std::to_string(i % 7) + "\n";
    for (int i = 0; i < 20; ++i) val += "And God said, Let there be light: and there was light.\n";
    io::write_file_atomic(dir + "/train.txt", text);
    io::write_file_atomic(dir + "/val.txt", val);
    args = "train --preset looped --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4 --set R=3"
           " --set depth_sampler=uniform --set data_train=" + dir + "/train.txt --set data_val=" + dir + "/val.txt"
           " --set eval_every=2 --set eval_batches=1 --set keep_checkpoints=2 --sample-len 0 --quiet -t 1";
  }
  void TearDown() override { fs::remove_all(dir); }
  CmdResult train(const std::string& out, const std::string& extra, const std::string& env = "") {
    return sh(env + " " + bin() + " " + args + " --out " + out + " " + extra);
  }
  // A straight run to step 6: the weights every resumed run must end with, byte for byte.
  std::string reference() {
    const std::string out = dir + "/reference";
    CmdResult r = train(out, "--steps 6");
    EXPECT_EQ(r.code, 0) << r.out;
    return io::read_file(out + "/model.safetensors");
  }
  // Resumes `out` to step 6 and checks the weights and the directory against the straight run.
  void expect_resumes_exactly(const std::string& out, const std::string& ref, const std::string& why) {
    CmdResult r = train(out, "--steps 6 --resume");
    ASSERT_EQ(r.code, 0) << why << "\n" << r.out;
    EXPECT_TRUE(io::read_file(out + "/model.safetensors") == ref) << why << ": the resumed run diverged\n" << r.out;
    const std::set<std::string> want = {"checkpoint.json", "checkpoints/model_step00000004.safetensors",
                                        "checkpoints/model_step00000006.safetensors",
                                        "checkpoints/train_state_step00000006.safetensors", "config.json",
                                        "metrics.jsonl", "model.best.safetensors", "model.safetensors"};
    EXPECT_EQ(names_in(out), want) << why;
  }
};

// Every pass of the writer through a fault point (io/fault.h) while step 4's checkpoint is written
// and committed.
std::vector<std::string> points_of_second_checkpoint(const std::string& trace) {
  std::vector<std::string> all;
  size_t at = 0;
  const std::string tag = "looplm fault point: ";
  while ((at = trace.find(tag, at)) != std::string::npos) {
    const size_t end = trace.find('\n', at);
    all.push_back(trace.substr(at + tag.size(), end - at - tag.size()));
    at = end;
  }
  auto pos = [&](const std::string& p) { return std::find(all.begin(), all.end(), p) - all.begin(); };
  const size_t from = pos("checkpoint.committed #1") + 1, to = pos("checkpoint.linked #2");
  // Every checkpoint.* pass and every rename; of the passes once per written block, in each file
  // (they end at its rename), the first write, the first block written and the last one.
  std::vector<std::string> out;
  bool first_write = true, first_partial = true;
  for (size_t i = from; i <= to && i < all.size(); ++i) {
    const std::string& p = all[i];
    const bool write = p.rfind("atomic.write", 0) == 0, partial = p.rfind("atomic.partial", 0) == 0;
    const bool last_partial = partial && i + 1 < all.size() && all[i + 1].rfind("atomic.before_rename", 0) == 0;
    if ((!write && !partial) || (write && first_write) || (partial && (first_partial || last_partial))) out.push_back(p);
    first_write = first_write && !write;
    first_partial = first_partial && !partial;
    if (p.rfind("atomic.before_rename", 0) == 0) first_write = first_partial = true;
  }
  return out;
}

std::string fault_env(const std::string& kind, const std::string& point) {
  const size_t sp = point.find(' ');  // "NAME #K" -> kind@NAME#K
  return "LOOPLM_FAULT='" + kind + "@" + point.substr(0, sp) + point.substr(sp + 1) + "'";
}

}  // namespace

TEST_F(Checkpoint, KilledAtEveryPointOfTheCommitResumesExactly) {
  const std::string ref = reference();
  CmdResult t = train(dir + "/trace", "--steps 6", "LOOPLM_FAULT=trace");
  ASSERT_EQ(t.code, 0) << t.out;
  const std::vector<std::string> points = points_of_second_checkpoint(t.out);
  ASSERT_GE(points.size(), 8u) << t.out;
  for (const char* want : {"checkpoint.model_written #2", "checkpoint.state_written #2", "checkpoint.committed #2",
                           "checkpoint.linked #2", "atomic.before_rename #5", "atomic.before_rename #7"})
    EXPECT_NE(std::find(points.begin(), points.end(), want), points.end()) << want << "\n" << t.out;
  int n = 0;
  for (const std::string& p : points) {
    const std::string out = dir + "/kill" + std::to_string(n++);
    CmdResult k = train(out, "--steps 6", fault_env("kill", p));
    ASSERT_EQ(k.code, 128 + SIGKILL) << p << "\n" << k.out;
    expect_resumes_exactly(out, ref, "killed at " + p);
    if (HasFailure()) return;
  }
}

TEST_F(Checkpoint, FullDiskInjectedAtEveryWriteKeepsTheLastCheckpoint) {
  const std::string ref = reference();
  CmdResult t = train(dir + "/trace", "--steps 6", "LOOPLM_FAULT=trace");
  ASSERT_EQ(t.code, 0) << t.out;
  // The first write of each file (points_of_second_checkpoint) and one in the middle of the weights.
  std::vector<std::string> writes;
  for (const std::string& p : points_of_second_checkpoint(t.out))
    if (p.rfind("atomic.write", 0) == 0) writes.push_back(p);
  ASSERT_EQ(writes.size(), 3u) << t.out;  // model, train state, manifest
  const int w0 = std::stoi(writes[0].substr(writes[0].find('#') + 1)), w1 = std::stoi(writes[1].substr(writes[1].find('#') + 1));
  writes.push_back("atomic.write #" + std::to_string((w0 + w1) / 2));
  int n = 0;
  for (const std::string& p : writes) {
    const std::string out = dir + "/full" + std::to_string(n++);
    CmdResult k = train(out, "--steps 6", fault_env("enospc", p));
    ASSERT_EQ(k.code, 1) << p << "\n" << k.out;
    EXPECT_NE(k.out.find("No space left on device"), std::string::npos) << p << "\n" << k.out;
    EXPECT_NE(k.out.find("the previous one in " + out + " is intact"), std::string::npos) << p << "\n" << k.out;
    // Nothing of the failed attempt is left, and the committed step is 2.
    EXPECT_EQ(nlohmann::json::parse(io::read_file(out + "/checkpoint.json"))["step"], 2) << p;
    for (auto& [name, bytes] : snapshot_files(out)) EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
    expect_resumes_exactly(out, ref, "ENOSPC at " + p);
    if (HasFailure()) return;
  }

}

// A real file system that fills up, and one that turns read-only: tmpfs mounts in a private mount
// namespace (unshare -m, as root). Skipped where the machine does not allow it.
TEST_F(Checkpoint, RealFullDiskAndReadOnlyDirectory) {
  if (sh("unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs " + dir + " && umount " + dir + "'").code != 0)
    GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here (needs root and unshare)";
  const std::string ref = reference();
  const uint64_t model = fs::file_size(dir + "/reference/checkpoints/model_step00000006.safetensors");
  const uint64_t state = fs::file_size(dir + "/reference/checkpoints/train_state_step00000006.safetensors");
  // Room for step 2's pair and step 4's model, not step 4's state (the data files are outside).
  const uint64_t room = 2 * model + state + state / 2 + 64 * 1024;
  const std::string out = dir + "/small";
  fs::create_directories(out);
  const std::string run = bin() + " " + args + " --out " + out;
  const std::string script =
      "mount -t tmpfs -o size=" + std::to_string(room) + " tmpfs " + out + " || exit 99\n" +
      run + " --steps 6; echo \"first exit $?\"\n"
      "grep -o '\"step\": [0-9]*' " + out + "/checkpoint.json\n"
      "mount -o remount,ro " + out + "\n" +
      run + " --steps 6 --resume; echo \"read-only exit $?\"\n"
      "mount -o remount,rw,size=64m " + out + "\n" +
      run + " --steps 6 --resume; echo \"resumed exit $?\"\n"
      "cp " + out + "/model.safetensors " + dir + "/small_final.safetensors\n"
      "ls -R " + out + "\n";
  io::write_file_atomic(dir + "/small.sh", script);
  CmdResult r = sh("unshare -m sh " + dir + "/small.sh");
  ASSERT_NE(r.code, 99) << r.out;
  EXPECT_NE(r.out.find("first exit 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"step\": 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("read-only exit 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Read-only file system"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed exit 0"), std::string::npos) << r.out;
  EXPECT_TRUE(io::read_file(dir + "/small_final.safetensors") == ref) << r.out;
}

TEST_F(Checkpoint, ResumeRefusesWhatItCannotVerifyAndChangesNothing) {
  const std::string ref = reference();
  auto fresh = [&](const std::string& name) {
    const std::string out = dir + "/" + name;
    CmdResult r = train(out, "--steps 4");
    EXPECT_EQ(r.code, 0) << r.out;
    return out;
  };
  auto refused = [&](const std::string& out, const std::string& why, const std::string& says) {
    const auto before = snapshot_files(out);
    CmdResult r = train(out, "--steps 6 --resume");
    EXPECT_EQ(r.code, 1) << why << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << why << "\n" << r.out;
    EXPECT_NE(r.out.find("--overwrite"), std::string::npos) << why << "\n" << r.out;
    EXPECT_NE(r.out.find("--init-from"), std::string::npos) << why << "\n" << r.out;
    EXPECT_TRUE(snapshot_files(out) == before) << why << ": a refused resume changed the run directory";
  };
  // The training state deleted (to save space, or a kill before the first state write of an
  // older looplm): the weights are never written over.
  std::string out = fresh("no_manifest");
  fs::remove(out + "/checkpoint.json");
  refused(out, "no manifest", "holds a run's weights but no checkpoint to resume from");
  out = fresh("no_state");
  fs::remove(out + "/checkpoints/train_state_step00000004.safetensors");
  refused(out, "state deleted", "which is missing");
  // Changed in place: one flipped byte in the weights (model.safetensors is the same file).
  out = fresh("flipped");
  {
    std::string b = io::read_file(out + "/checkpoints/model_step00000004.safetensors");
    b[b.size() - 5] ^= 1;
    FILE* f = std::fopen((out + "/checkpoints/model_step00000004.safetensors").c_str(), "r+b");
    std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
  }
  refused(out, "flipped byte", "which has changed since it was written");
  // Another step's state put in place of this one's (sizes equal; the CRC differs).
  out = fresh("swapped");
  {
    const std::string other = dir + "/reference/checkpoints/train_state_step00000006.safetensors";
    fs::copy_file(other, out + "/checkpoints/train_state_step00000004.safetensors", fs::copy_options::overwrite_existing);
  }
  refused(out, "swapped state", "which has changed since it was written");
  // A manifest that points elsewhere, and one that is not a manifest.
  out = fresh("pointing");
  {
    auto j = nlohmann::json::parse(io::read_file(out + "/checkpoint.json"));
    j["train_state"]["file"] = "../reference/checkpoints/train_state_step00000006.safetensors";
    io::write_file_atomic(out + "/checkpoint.json", j.dump());
  }
  refused(out, "manifest pointing elsewhere", "expected 'checkpoints/train_state_step00000004.safetensors'");
  out = fresh("garbage");
  io::write_file_atomic(out + "/checkpoint.json", std::string(100000, '['));
  refused(out, "garbage manifest", "nests JSON deeper than 64 levels");
  // A state whose counters do not follow from its step, made to pass the manifest's checks.
  const std::vector<std::pair<std::string, std::string>> lies = {
      {"data_cursor", "data_cursor 3, but 4 steps of grad_accum 1 draw 4 batches"},
      {"adam_t", "adam_t 3 differs from step 4"},
      {"tokens_seen", "tokens_seen 1, but 4 steps see 256"},
      {"best_step", "best_step 9"},
      {"step", "step 3, expected 4"},
  };
  for (const auto& [key, says] : lies) {
    out = fresh("lie_" + key);
    const std::string state = out + "/checkpoints/train_state_step00000004.safetensors";
    auto f = io::SafetensorsFile::open(state);
    auto meta = f.metadata();
    auto s = nlohmann::json::parse(meta["state"]);
    s[key] = key == "tokens_seen" ? nlohmann::json(1.0) : key == "best_step" ? nlohmann::json(9) : nlohmann::json(3);
    meta["state"] = s.dump();
    std::vector<io::TensorRef> t;
    for (const std::string& n : f.names()) t.push_back({n, f.get(n).dtype, f.get(n).shape, f.get(n).data});
    const std::string tmp = dir + "/state.tmp.safetensors";
    const io::WrittenFile w = io::write_safetensors(tmp, t, meta);
    fs::rename(tmp, state);
    auto j = nlohmann::json::parse(io::read_file(out + "/checkpoint.json"));
    j["train_state"]["bytes"] = w.bytes;
    j["train_state"]["crc32c"] = io::crc32c_hex(w.crc32c);
    io::write_file_atomic(out + "/checkpoint.json", j.dump());
    refused(out, "state lying about " + key, key == "step" ? "holds step 3, the manifest says 4" : says);
  }
  // A whole checkpoint (manifest, its files, model.safetensors) copied in from another run with
  // the same config: every file verifies, only the run id tells them apart.
  out = fresh("copied_in");
  {
    const std::string other = fresh("other_run");
    for (const char* f : {"checkpoint.json", "model.safetensors", "model.best.safetensors"})
      fs::copy_file(other + "/" + f, out + "/" + f, fs::copy_options::overwrite_existing);
    fs::remove_all(out + "/checkpoints");
    fs::copy(other + "/checkpoints", out + "/checkpoints");
    const auto id = [](const std::string& d, const char* f) { return nlohmann::json::parse(io::read_file(d + "/" + f))["run_id"]; };
    EXPECT_EQ(id(other, "checkpoint.json"), id(other, "config.json"));
    EXPECT_NE(id(other, "config.json"), id(out, "config.json"));
    refused(out, "checkpoint copied in", "a checkpoint copied in from another run");
    // A run moved whole (config.json with it) is the same run: it resumes.
    fs::copy_file(other + "/config.json", out + "/config.json", fs::copy_options::overwrite_existing);
    expect_resumes_exactly(out, ref, "a run moved whole");
    EXPECT_EQ(id(other, "checkpoint.json"), id(out, "checkpoint.json"));
  }
  // The way on that keeps the weights: a new run from them.
  CmdResult r = sh(bin() + " train --init-from " + dir + "/no_manifest --out " + dir + "/from_weights --steps 0 "
                   "--sample-len 0 --quiet -t 1");
  ASSERT_EQ(r.code, 0) << r.out;
  auto a = io::SafetensorsFile::open(dir + "/no_manifest/model.safetensors");
  auto b = io::SafetensorsFile::open(dir + "/from_weights/model.safetensors");
  for (const std::string& n : a.names())
    EXPECT_TRUE(a.read_f32(n, a.get(n).shape) == b.read_f32(n, b.get(n).shape)) << n;
  r = sh(bin() + " train --init-from " + dir + "/no_manifest --out " + dir + "/wider --set d_model=64 --quiet");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("may change training keys only, and add an exit gate (--set exit_gate=true)"), std::string::npos) << r.out;
}

// A run killed before its first checkpoint holds its config.json: --resume starts it again from
// step 0 with that config (not the default preset), whatever the command line's --preset says.
TEST_F(Checkpoint, ResumeBeforeTheFirstCheckpointUsesTheRunsConfig) {
  const std::string ref = reference();
  const std::string out = dir + "/early";
  CmdResult k = train(out, "--steps 6", "LOOPLM_FAULT=kill@checkpoint.model_written#1");
  ASSERT_EQ(k.code, 128 + SIGKILL) << k.out;
  ASSERT_FALSE(fs::exists(out + "/checkpoint.json"));
  CmdResult r = sh(bin() + " train --out " + out + " --resume --steps 6 --sample-len 0 -t 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("holds no checkpoint yet"), std::string::npos) << r.out;
  EXPECT_TRUE(io::read_file(out + "/model.safetensors") == ref) << r.out;
}

// An older looplm's run (model.safetensors + train_state.safetensors, no manifest) resumes, with a
// note; the next checkpoint is written by the protocol.
TEST_F(Checkpoint, OlderRunDirectoriesStillResume) {
  const std::string ref = reference();
  const std::string out = dir + "/old";
  CmdResult r = train(out, "--steps 4");
  ASSERT_EQ(r.code, 0) << r.out;
  fs::copy_file(out + "/checkpoints/train_state_step00000004.safetensors", out + "/train_state.safetensors");
  fs::remove(out + "/checkpoint.json");
  fs::remove_all(out + "/checkpoints");
  r = train(out, "--steps 6 --resume");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("written by an older looplm"), std::string::npos) << r.out;
  EXPECT_TRUE(io::read_file(out + "/model.safetensors") == ref);
  EXPECT_FALSE(fs::exists(out + "/train_state.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/checkpoint.json"));
}

// Two trainers on one directory would interleave their checkpoints: the second is refused.
TEST_F(Checkpoint, OneTrainerPerRunDirectory) {
  const std::string out = dir + "/busy";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    const std::string cmd = "exec " + bin() + " " + args + " --out " + out + " --steps 1000000";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  close(fds[1]);
  // Wait for its first checkpoint: then it holds the lock and the directory holds a run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(out + "/checkpoint.json") && std::chrono::steady_clock::now() < deadline) usleep(20000);
  CmdResult r = train(out, "--steps 6 --resume");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is in use by another looplm train (pid " + std::to_string(pid) + ")"), std::string::npos) << r.out;
  r = train(out, "--steps 6 --overwrite");
  EXPECT_EQ(r.code, 1) << r.out;
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  close(fds[0]);
  r = train(out, "--steps 6 --resume");  // the lock ends with its process, however it ends
  EXPECT_EQ(r.code, 0) << r.out;
}
