#include "eval_calibration.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "looplm/error.h"

namespace looplm::cli {

using Calibration = EvalResult::ExitCalibration;

double parse_loss_budget(const std::string& text) {
  std::string t = text;
  const bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !std::isfinite(x) || x < 0)
    throw UsageError("--loss-budget takes a fraction or a percentage of the full-depth loss (0.01 or 1%), got '" + text + "'");
  return percent ? x / 100.0 : x;
}

const Calibration::Point* cheapest_within(const Calibration& c, const Calibration::Rule& rule, double budget) {
  const Calibration::Point* best = nullptr;
  for (const auto& p : rule.frontier)
    if (p.loss <= c.full_loss * (1 + budget) && (!best || p.mean_steps < best->mean_steps)) best = &p;
  return best;
}

nlohmann::json calibration_json(const Calibration& c, double budget) {
  nlohmann::json rules = nlohmann::json::object();
  for (const auto& rule : c.rules) {
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& p : rule.frontier) pts.push_back({{"threshold", p.threshold}, {"mean_steps", p.mean_steps}, {"loss", p.loss}});
    nlohmann::json r = {{"frontier", pts}};
    if (const auto* best = cheapest_within(c, rule, budget))
      r["chosen"] = {{"threshold", best->threshold}, {"mean_steps", best->mean_steps}, {"loss", best->loss},
                     {"steps_saved", 1.0 - best->mean_steps / c.depth}};
    else
      r["chosen"] = nullptr;
    rules[rule.name] = r;
  }
  return {{"depth", c.depth}, {"tokens", c.tokens}, {"full_loss", c.full_loss}, {"loss_budget", budget},
          {"max_loss", c.full_loss * (1 + budget)}, {"rules", rules}};
}

void print_calibration(const Calibration& c, double budget) {
  std::printf("\nexit calibration over %lld tokens: every token at depth %d has loss %.4f; budget %g%% allows %.4f\n",
              (long long)c.tokens, c.depth, c.full_loss, budget * 100, c.full_loss * (1 + budget));
  std::printf("| rule | threshold | loop steps per token | steps saved | loss | loss vs full depth |\n|---|---|---|---|---|---|\n");
  for (const auto& rule : c.rules) {
    const auto* best = cheapest_within(c, rule, budget);
    if (!best) {
      std::printf("| %s | none within the budget | | | | |\n", rule.name.c_str());
      continue;
    }
    std::printf("| %s | %.6g | %.3f | %.1f%% | %.4f | %+.2f%% |\n", rule.name.c_str(), best->threshold, best->mean_steps,
                100 * (1 - best->mean_steps / c.depth), best->loss, 100 * (best->loss / c.full_loss - 1));
  }
  std::printf("(depth: every token runs that many steps; gate: exit once the cumulative exit probability reaches the "
              "threshold; kl, entropy, latent: exit at the first step whose signal is below it. `eval --exit-rule RULE "
              "--exit-threshold X` scores one of them alone; --json lists every rule's whole frontier)\n");
}

void plot_calibration(const Calibration& c, double budget, const std::string& png) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("looplm_calibration_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string plot = "plot ";
  for (size_t i = 0; i < c.rules.size(); ++i) {
    const fs::path f = dir / (c.rules[i].name + ".dat");
    std::ofstream out(f);
    for (const auto& p : c.rules[i].frontier) out << p.mean_steps << " " << p.loss << "\n";
    plot += (i ? ", " : "") + ("'" + f.string() + "' using 1:2 with linespoints title '" + c.rules[i].name + "'");
  }
  char budget_line[160];
  std::snprintf(budget_line, sizeof budget_line, ", %.9g with lines dashtype 2 lc rgb 'gray40' title 'loss budget (+%g%%)'",
                c.full_loss * (1 + budget), budget * 100);
  plot += budget_line;
  const std::string script = "set terminal pngcairo size 1000,620 noenhanced font ',11'\nset output '" + png +
                             "'\nset xlabel 'loop steps per token'\nset ylabel 'loss (nats per token)'\nset key top right\n"
                             "set grid\nset title 'early exit: loss against loop steps (" + std::to_string(c.tokens) +
                             " tokens)'\n" + plot + "\n";
  FILE* g = ::popen("gnuplot 2>&1", "w");
  const bool sent = g && std::fwrite(script.data(), 1, script.size(), g) == script.size();
  const int status = g ? ::pclose(g) : -1;
  fs::remove_all(dir);
  if (!sent || status != 0)
    throw Error("--plot " + png + ": gnuplot did not draw it (is it installed? apt-get install gnuplot-nox)");
}

}  // namespace looplm::cli
