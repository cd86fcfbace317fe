"""The Prometheus alerting rules the product ships (deploy/prometheus/perftracker-alerts.yml):
promtool checks them and runs their unit tests (perftracker-alerts_test.yml: each alert firing on
series where it should and silent beside them), and every metric the rules and their tests name is
one the server exports, with the labels it exports it with (read from the server's /metrics code,
src/server/server_metrics.cc), so the tests' series have the shape a real scrape has."""
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

RULES_DIR = os.path.join(ptest.SOURCE, "deploy", "prometheus")
RULES = os.path.join(RULES_DIR, "perftracker-alerts.yml")
RULES_TEST = os.path.join(RULES_DIR, "perftracker-alerts_test.yml")
METRICS_SOURCE = os.path.join(ptest.SOURCE, "src", "server", "server_metrics.cc")


def exported():
    """{family: set of label keys} the server's /metrics code writes."""
    with open(METRICS_SOURCE) as f:
        text = f.read()
    text = re.sub(r'"\s*\n\s*"', "", text)  # adjacent string literals, joined
    families = {name: set() for name in re.findall(r'[Hh]ead\((?:out, )?"(perftracker_\w+)"', text)}
    for name, labels in re.findall(r'(perftracker_\w+)\{\{(.*?)\}\}', text):
        families.setdefault(name, set()).update(re.findall(r'(\w+)=\\"', labels))
    return families


class AlertRules(unittest.TestCase):
    def setUp(self):
        self.promtool = shutil.which("promtool")
        self.assertIsNotNone(self.promtool, "promtool is missing: scripts/deps.sh installs prometheus")

    def test_promtool_checks_the_rules_and_runs_their_tests(self):
        for args in (["check", "rules", RULES], ["test", "rules", RULES_TEST]):
            p = subprocess.run([self.promtool, *args], capture_output=True, text=True,
                               cwd=RULES_DIR, timeout=120)
            self.assertEqual(p.returncode, 0, f"promtool {' '.join(args)}:\n{p.stdout}{p.stderr}")

    def test_the_rules_name_what_the_server_exports_as_it_exports_it(self):
        families = exported()
        self.assertIn("perftracker_slowdown_ratio", families)
        self.assertEqual(families["perftracker_memory_bytes"], {"job", "rank", "host", "kind"})
        with open(RULES) as f:
            rules = f.read()
        named = set(re.findall(r"\bperftracker_\w+", re.sub(r"#.*", "", rules)))
        self.assertTrue(named)
        self.assertEqual(named - set(families), set(), "the rules name metrics nobody exports")
        with open(RULES_TEST) as f:
            series = re.findall(r"series: '(\w+)\{([^}]*)\}'", f.read())
        self.assertGreater(len(series), 10)
        for name, labels in series:
            self.assertIn(name, families, name)
            keys = set(re.findall(r'(\w+)="', labels))
            self.assertEqual(keys, families[name], f"{name}{{{labels}}}: not the labels /metrics has")


if __name__ == "__main__":
    ptest.main()
