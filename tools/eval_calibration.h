// `looplm eval --calibrate`: every early-exit rule's loss against loop steps per token, the threshold
// of each that saves the most steps within a loss budget, and the plot (docs/cli.md).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "looplm/looplm.h"

namespace looplm::cli {

// "1%" or "0.01" -> 0.01; UsageError naming --loss-budget for anything else or a negative budget.
double parse_loss_budget(const std::string& text);
// The frontier point of `rule` with the fewest loop steps whose loss is within (1 + budget) of
// every token at the full depth; nullptr when none is.
const EvalResult::ExitCalibration::Point* cheapest_within(const EvalResult::ExitCalibration& c,
                                                          const EvalResult::ExitCalibration::Rule& rule, double budget);
nlohmann::json calibration_json(const EvalResult::ExitCalibration& c, double budget);
void print_calibration(const EvalResult::ExitCalibration& c, double budget);
// The frontiers as a PNG through gnuplot (Error when gnuplot is missing or fails).
void plot_calibration(const EvalResult::ExitCalibration& c, double budget, const std::string& png);

}  // namespace looplm::cli
