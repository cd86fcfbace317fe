#include "report/html.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "diagnose/diagnose.h"
#include "diagnose/testing.h"
#include "report/html_charts.h"

namespace perftracker::report {
namespace {

using diagnose::testing::Fn;
using diagnose::testing::Rank;
using pattern::FunctionClass;

// Rank SLOW computes 3x longer in aten::mm (with a Python stack) while its peers wait.
std::vector<pattern::RankSummary> Straggler(int world, int slow) {
  std::vector<pattern::RankSummary> ranks;
  for (int r = 0; r < world; ++r) {
    const bool s = r == slow;
    ranks.push_back(Rank(r, world,
                         {Fn("aten::mm", FunctionClass::kCompute, s ? 30 : 10, 7,
                             trace::EventKind::kCpuOp, "train.py(40): step;model.py(7): forward"),
                          Fn("aten::addmm", FunctionClass::kCompute, 8, 4),
                          Fn("DataLoader.__next__", FunctionClass::kDataLoader, 2, 1),
                          Fn("gloo:all_reduce", FunctionClass::kCollective, s ? 1 : 21)},
                         40, "node-" + std::to_string(r / 8)));
  }
  return ranks;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(HtmlTest, EscapesMarkup) {
  EXPECT_EQ(internal::Escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

TEST(HtmlTest, DeviationColoursRunBlueWhiteRed) {
  EXPECT_EQ(internal::DeviationColour(0), "#ffffff");
  EXPECT_EQ(internal::DeviationColour(1), "#d62728");
  EXPECT_EQ(internal::DeviationColour(7), "#d62728");  // clipped
  EXPECT_EQ(internal::DeviationColour(-1), "#1f77b4");
}

TEST(HtmlTest, AColumnHeadingIsTheFunctionsNameAndWhereItIs) {
  using internal::HeadingOf;
  const auto py = HeadingOf(
      "/usr/lib/python3/dist-packages/torch/nn/modules/module.py(1501): "
      "_call_impl");
  EXPECT_EQ(py.name, "_call_impl");
  EXPECT_EQ(py.where, "module.py:1501");
  EXPECT_EQ(HeadingOf("void at::native::vectorized_elementwise_kernel<4, float>(int, float*)").name,
            "vectorized_elementwise_kernel");
  EXPECT_EQ(HeadingOf("aten::addmm").name, "aten::addmm");
  EXPECT_EQ(HeadingOf("aten::addmm").where, "");
  EXPECT_EQ(HeadingOf("<built-in method run_backward of torch._C._EngineBase object at 0x7f>").name,
            "<built-in method run_backward of torch._C._EngineBase object at 0x7f>");
  EXPECT_EQ(HeadingOf("odd(name): x").where, "");  // "(name)" is no line number
}

TEST(HtmlTest, TheDifferentialViewsColumnsAreToldApart) {
  // Four functions of one long folder: their names' first 28 characters were the same.
  const std::string dir = "/home/user/.venv/lib/python3.11/site-packages/torch/nn/modules/";
  std::vector<pattern::RankSummary> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(Rank(r, 4,
                         {Fn(dir + "module.py(1501): _call_impl", FunctionClass::kPython, 9, 3,
                             trace::EventKind::kPythonFunction),
                          Fn(dir + "module.py(1520): _wrapped_call_impl", FunctionClass::kPython, 8,
                             3, trace::EventKind::kPythonFunction),
                          Fn(dir + "linear.py(114): forward", FunctionClass::kPython, 7, 3,
                             trace::EventKind::kPythonFunction),
                          Fn(dir + "conv.py(114): forward", FunctionClass::kPython, 6, 3,
                             trace::EventKind::kPythonFunction)},
                         40));
  pattern::CompactJob job;
  for (const auto& r : ranks) job.Add(r);
  const std::string heat = internal::Heatmap(diagnose::Diagnose(job), job);
  std::set<std::string> headings;
  const std::regex th("<th title=\"[^\"]*\">(.*?)</th>");
  for (auto it = std::sregex_iterator(heat.begin(), heat.end(), th); it != std::sregex_iterator();
       ++it)
    headings.insert((*it)[1]);
  EXPECT_EQ(headings.size(), 4u) << heat;
  EXPECT_TRUE(headings.count(
      "<span class=\"fn\">_call_impl</span><span class=\"at\">module.py:1501</span>"))
      << heat;
  EXPECT_TRUE(
      headings.count("<span class=\"fn\">forward</span><span class=\"at\">conv.py:114</span>"))
      << heat;
}

TEST(HtmlTest, AStragglerPageNamesTheCulpritWithItsCharts) {
  auto ranks = Straggler(4, 2);
  pattern::CompactJob job;
  for (const auto& r : ranks) job.Add(r);
  job.SortByRank();
  diagnose::Diagnosis d = diagnose::Diagnose(job);
  ASSERT_FALSE(d.findings.empty());
  ASSERT_EQ(d.findings[0].ranks, std::vector<int>{2});
  HtmlInput in;
  in.title = "job <1>";
  in.diagnosis = &d;
  in.job = &job;
  const std::string page = RenderHtml(in);
  // Self-contained: a CSP that forbids every request, no script, no outside reference.
  EXPECT_NE(page.find("Content-Security-Policy"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_FALSE(std::regex_search(page, std::regex("(src|href)=\"(https?:)?//")));
  EXPECT_NE(page.find("<title>job &lt;1&gt;</title>"), std::string::npos);
  // The finding's card: its function, its stack, and the culprit chart with rank 2 in red.
  EXPECT_NE(page.find("<code>aten::mm</code>"), std::string::npos);
  EXPECT_NE(page.find("<code>model.py(7): forward</code>"), std::string::npos);
  EXPECT_NE(page.find("aria-label=\"the culprit against its peers: aten::mm, ms per iteration\""),
            std::string::npos);
  EXPECT_NE(page.find("<title>rank 2: 30.0 ms</title>"), std::string::npos);
  EXPECT_NE(page.find("text-anchor=\"middle\" class=\"lbl bad\">2</text>"), std::string::npos);
  // The differential view: rank 2's aten::mm cell is +200% against its peers' median.
  EXPECT_NE(page.find("rank 2, aten::mm: 30.0 ms per iteration, +200% vs its peers' median "
                      "10.0 ms"),
            std::string::npos);
  // What the replay says fixing it gives: the others wait 20 ms for rank 2.
  EXPECT_NE(page.find("<b>What if fixed:</b> saves 20.0 ms per iteration (the iteration 40.0 ms "
                      "&rarr; 20.0 ms)"),
            std::string::npos);
  EXPECT_NE(page.find("<b>At the collectives the others wait for</b> rank 2 (20.0 ms an "
                      "iteration)"),
            std::string::npos);
  // The iteration chart and the breakdown, one line / bar per rank at 4 ranks.
  EXPECT_EQ(Count(page, "<polyline"), 4u);
  EXPECT_NE(page.find("rank 2: data loading 2.0 ms"), std::string::npos);
  // No per-iteration collective times here: no critical path; with them, who was last when.
  EXPECT_EQ(page.find("The critical path"), std::string::npos);
  d.job.critical_path = {{0, {{0, 2, 20}}}, {1, {{0, 2, 19}}}, {2, {{0, 1, 3}}}};
  EXPECT_NE(RenderHtml(in).find("<b>The critical path</b> (the last rank to arrive at the "
                                "collectives), per iteration: rank 2 in 2, rank 1 in 1 of 3 "
                                "iterations."),
            std::string::npos);
}

TEST(HtmlTest, MemoryIsChartedPerRankAndDevice) {
  auto ranks = Straggler(4, -1);
  pattern::CompactJob job;
  for (const auto& r : ranks) job.Add(r);
  diagnose::Diagnosis d = diagnose::Diagnose(job);
  HtmlInput in;
  in.diagnosis = &d;
  in.job = &job;
  EXPECT_EQ(RenderHtml(in).find("memory per rank</h2>"), std::string::npos);  // none recorded
  for (int r = 0; r < 4; ++r) {
    diagnose::RankMemoryUse m;
    m.rank = r;
    m.device = "host";
    m.iteration_numbers = {100, 200, 300};
    // Rank 3 leaks 1 GiB every 100 iterations.
    for (int i = 0; i < 3; ++i)
      m.iteration_end_bytes.push_back((2.0 + (r == 3 ? i : 0)) * (1 << 30));
    d.job.memory.push_back(m);
  }
  const std::string page = RenderHtml(in);
  EXPECT_NE(page.find("<h2>Host memory per rank</h2>"), std::string::npos);
  EXPECT_EQ(page.find("<h2>GPU memory per rank</h2>"), std::string::npos);
  EXPECT_NE(page.find("host memory per rank"), std::string::npos);  // the chart's own title
  EXPECT_NE(page.find(">GiB<"), std::string::npos);
  EXPECT_NE(page.find("<title>rank 3</title>"), std::string::npos);
}

TEST(HtmlTest, ACleanJobSaysSo) {
  auto ranks = Straggler(4, -1);
  pattern::CompactJob job;
  for (const auto& r : ranks) job.Add(r);
  diagnose::Diagnosis d = diagnose::Diagnose(job);
  ASSERT_TRUE(d.findings.empty());
  HtmlInput in;
  in.diagnosis = &d;
  in.job = &job;
  const std::string page = RenderHtml(in);
  EXPECT_NE(page.find("No findings: nothing costs more than the thresholds."), std::string::npos);
  EXPECT_EQ(page.find("<h2>Attempts</h2>"), std::string::npos);  // one attempt: not listed
  // An elastic restart: both attempts, escaped.
  d.job.attempts.resize(2);
  d.job.attempts[0].summary = "attempt 0: ended: rank 1 first, killed or crashed <no hook>";
  d.job.attempts[1].summary = "attempt 1 (restart count 1): ranks 0-3";
  const std::string restarted = RenderHtml(in);
  EXPECT_NE(restarted.find("<h2>Attempts</h2>"), std::string::npos);
  EXPECT_NE(restarted.find("<li>attempt 0: ended: rank 1 first, killed or crashed &lt;no hook&gt;"
                           "</li><li>attempt 1 (restart count 1): ranks 0-3</li>"),
            std::string::npos);
}

TEST(HtmlTest, TenThousandRanksGiveDistributionsAndOutliersUnderFiveMegabytes) {
  auto ranks = Straggler(10000, 4321);
  pattern::CompactJob job;
  for (auto& r : ranks) job.Add(std::move(r));
  job.SortByRank();
  diagnose::Diagnosis d = diagnose::Diagnose(job);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>{4321});
  HtmlInput in;
  in.diagnosis = &d;
  in.job = &job;
  in.windows = {{1, 30, 10, "baseline"}};
  std::vector<RunSeries> series;
  for (int r = 0; r < 10000; ++r) {
    RunSeries s;
    s.rank = r;
    for (int i = 0; i < 2000; ++i) {
      s.steps.push_back(i);
      s.ms.push_back(r == 4321 ? 60.f : 40.f);
    }
    series.push_back(std::move(s));
  }
  in.series = std::move(series);
  const std::string page = RenderHtml(in);
  EXPECT_LT(page.size(), 5u << 20);
  // The culprit at scale: a histogram with rank 4321 marked, the band of every rank with its
  // line drawn over it, 40 heatmap rows and a note about the others.
  EXPECT_NE(page.find(">rank 4321</text>"), std::string::npos);
  EXPECT_NE(page.find("10th to 90th percentile of 10000 ranks"), std::string::npos);
  EXPECT_NE(page.find("<title>rank 4321</title>"), std::string::npos);
  EXPECT_NE(page.find("40 of 10000 ranks shown"), std::string::npos);
  EXPECT_LE(Count(page, "<polyline"), 8u);
  EXPECT_NE(page.find("w1</text>"), std::string::npos);
}

TEST(HtmlTest, WithoutPatternsOnlyTheCardsAndANote) {
  diagnose::Diagnosis d;
  d.job.world_size = 2;
  d.job.ranks = {0, 1};
  diagnose::Finding f;
  f.category = diagnose::Category::kHang;
  f.ranks = {1};
  f.summary = "rank 1 waits in all_reduce";
  f.functions = {{"wait", "python_function", {"train.py(3): main", "dist.py(9): wait"}}};
  d.findings.push_back(f);
  HtmlInput in;
  in.diagnosis = &d;
  const std::string page = RenderHtml(in);
  EXPECT_NE(page.find("rank 1 waits in all_reduce"), std::string::npos);
  EXPECT_NE(page.find("<code>dist.py(9): wait</code>"), std::string::npos);
  EXPECT_NE(page.find("the per-rank views are left out"), std::string::npos);
  EXPECT_EQ(page.find("<svg"), std::string::npos);
}

TEST(HtmlTest, TheFindingsTableSetsEachRulesCostBesideTheReplays) {
  diagnose::Diagnosis d;
  d.job.world_size = 4;
  d.job.ranks = {0, 1, 2, 3};
  diagnose::Finding straggler;
  straggler.category = diagnose::Category::kStraggler;
  straggler.ranks = {2};
  straggler.impact_ms = 30;  // twice the replay's saving: over kWhatIfOverclaim
  straggler.what_if_ms = 15;
  straggler.what_if_iteration_ms = 85;
  diagnose::Finding gc;
  gc.category = diagnose::Category::kGc;
  gc.ranks = {0, 1, 2, 3};
  gc.impact_ms = 4;
  d.findings = {straggler, gc};
  HtmlInput in;
  in.diagnosis = &d;
  const std::string page = RenderHtml(in);
  EXPECT_NE(page.find("<th>rule's cost</th><th>what if fixed</th><th>iteration without it</th>"),
            std::string::npos);
  EXPECT_NE(page.find("<tr class=\"bad\"><td>1</td><td>straggler</td><td>2</td><td>30.0 ms</td>"
                      "<td>15.0 ms (the rule claims more)</td><td>85.0 ms</td></tr>"),
            std::string::npos);
  EXPECT_NE(page.find("<tr class=\"\"><td>2</td><td>gc</td><td>0-3</td><td>4.0 ms</td>"
                      "<td>not replayed</td><td>-</td></tr>"),
            std::string::npos);
  // One finding: its card says it all, no table.
  d.findings.pop_back();
  EXPECT_EQ(RenderHtml(in).find("<th>rule's cost</th>"), std::string::npos);
}

TEST(HtmlTest, AHangGroupsTheRanksByWhereTheyStand) {
  std::vector<pattern::RankStacks> stacks;
  for (int r = 0; r < 4; ++r) {
    pattern::RankStacks s;
    s.rank = r;
    pattern::ThreadStack t;
    t.main = true;
    t.frames = {{"train.py", 10, "main"},
                r == 2 ? pattern::StackFrame{"train.py", 97, "hang_forever"}
                       : pattern::StackFrame{"train.py", 201, "train_step"}};
    s.threads.push_back(t);
    if (r != 2) s.last_collective = {"all_reduce", 7, "train.py", 201, true, 6.25};
    stacks.push_back(s);
  }
  std::vector<WaitGroup> g = GroupWaits(stacks);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].ranks, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(g[0].where, "train.py:201 in train_step");
  EXPECT_EQ(g[0].collective, "in all_reduce for 6.2 s");
  EXPECT_EQ(g[1].ranks, std::vector<int>{2});
  EXPECT_EQ(g[1].stack,
            (std::vector<std::string>{"train.py:10 in main", "train.py:97 in hang_forever"}));
  diagnose::Diagnosis d;
  d.job.run_iterations[0] = {90, 60, 58, 100, 40, 120};
  HtmlInput in;
  in.diagnosis = &d;
  in.waits = g;
  const std::string page = RenderHtml(in);
  EXPECT_NE(page.find("<h2>Where each rank stands</h2>"), std::string::npos);
  EXPECT_NE(page.find("<tr class=\"bad\"><td>2</td><td><code>train.py:97 in hang_forever</code>"),
            std::string::npos);
  // No window behind a hang: the chips show the run's iterations.
  EXPECT_NE(page.find("<b>90</b><span>iterations run</span>"), std::string::npos);
}

}  // namespace
}  // namespace perftracker::report
