"""The dashboard in a real browser: a head and a worker run an experiment;
headless Chromium (Debian's `chromium`) loads the page the head serves
(--http-endpoint) and the file `ztune report` writes, and runs their scripts;
and, served over HTTPS with logins, the page a `ztune dashboard` link opens.
The rendered page must list every trial in the table and draw one metric line
per trial that reported. Screenshots are kept as test artifacts
($ZTUNE_BUILD_DIR/test-artifacts/dashboard-live.png, dashboard-report.png,
dashboard-login.png).
"""

import html.parser
import json
import os
import shutil
import subprocess
import unittest
import urllib.error
import urllib.request

import client_cluster
from client_cluster import LocalCluster

from ztune.client import Client

MISSING = client_cluster.missing_binaries()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = os.path.join(client_cluster.BUILD_DIR, "test-artifacts")


def chromium(*args):
    # --no-sandbox: the tests run as root in CI; the page is our own file.
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--virtual-time-budget=5000",
                           "--window-size=1300,1800", *args],
                          capture_output=True, text=True, timeout=120)


class Dom(html.parser.HTMLParser):
    """Trial rows, metric lines and table cells of the rendered page."""

    def __init__(self):
        super().__init__()
        self.rows, self.lines, self.pc_lines, self.cells = [], [], [], []
        self._in_td = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "tr" and "trial-row" in classes:
            self.rows.append(a.get("data-trial"))
        if tag == "path" and "trial-line" in classes:
            self.lines.append(a.get("data-trial"))
        if tag == "path" and "pc-line" in classes:
            self.pc_lines.append(a.get("data-trial"))
        self._in_td = tag == "td"

    def handle_data(self, data):
        if self._in_td:
            self.cells.append(data)

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_td = False


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
@unittest.skipIf(CHROMIUM is None,
                 "chromium is not installed (scripts/install-deps.sh installs it for the tests)")
class DashboardReportTest(unittest.TestCase):
    def rendered(self, url, *flags):
        dom = chromium(*flags, "--dump-dom", url)
        self.assertEqual(dom.returncode, 0, dom.stderr[-3000:])
        parsed = Dom()
        parsed.feed(dom.stdout)
        return parsed, dom.stdout

    def screenshot(self, url, name, *flags):
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, name)
        if os.path.exists(shot):
            os.remove(shot)
        out = chromium(*flags, "--screenshot=" + shot, url)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(shot), 20000)

    def test_a_dashboard_off_loopback_is_refused(self):
        c = LocalCluster(self.addCleanup, "dash-refused", insecure=True)
        out = subprocess.run([client_cluster.HEAD_BIN, "--data-dir", c.data_dir, "--insecure",
                              "--http-endpoint", "0.0.0.0:8265"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
        self.assertIn("loopback only", out.stderr)
        self.assertIn("ssh -L", out.stderr)

    @unittest.skipIf(shutil.which("openssl") is None,
                     "openssl is not installed (scripts/install-deps.sh installs it for the tests)")
    def test_a_browser_logs_in_with_a_link_and_sees_the_trials_over_https(self):
        c = LocalCluster(self.addCleanup, "dash-tls")
        cert, key = os.path.join(c.keys_dir, "dash.crt"), os.path.join(c.keys_dir, "dash.key")
        made = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", key, "-out", cert], capture_output=True, text=True, timeout=60)
        self.assertEqual(made.returncode, 0, made.stderr)
        os.chmod(key, 0o600)
        reader = c.add_client("reader", "read")
        admin = c.add_client("admin", "admin")
        c.start_head("--http-endpoint", "127.0.0.1:0", "--http-tls-cert", cert,
                     "--http-tls-key", key)
        with open(os.path.join(c.dir, "endpoints.json")) as f:
            url = json.load(f)["http_endpoint"]
        self.assertRegex(url, r"^https://127\.0\.0\.1:\d+/$")
        c.start_worker("w0", 2)
        client = Client(c.client_endpoint, client_key=admin, head_key=c.head_pub_file,
                        timeout_s=10)
        self.addCleanup(client.close)
        spec = {"name": "dash-tls", "trainable": "quadratic",
                "param_space": {"lr": {"grid_search": [0.05, 0.1, 0.2]}, "x0": 10, "target": 0},
                "metric": "loss", "mode": "min", "stop": {"training_iteration": 5}, "seed": 1}
        exp = client.submit(spec)
        self.assertTrue(client.wait(exp, poll_s=0.05, timeout_s=60)["finished"], c.logs())
        trial_ids = [f"{exp}_{i:05d}" for i in range(3)]

        # Without a login the browser gets the login help, no trial.
        parsed, text = self.rendered(url, "--ignore-certificate-errors")
        self.assertEqual(parsed.rows, [], text[-3000:])
        self.assertIn("ztune dashboard", text)

        # A `read` key's link (the CLI's): the browser follows it to the page,
        # its cookie reads the data, and the page draws every trial.
        out = subprocess.run([client_cluster.CLI_BIN, "--head", c.client_endpoint, "--key", reader,
                              "--head-key", c.head_pub_file, "dashboard"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        link = out.stdout.strip()
        self.assertTrue(link.startswith(url + "login?token="), link)
        self.assertIn("as 'reader'", out.stderr)
        parsed, text = self.rendered(link, "--ignore-certificate-errors")
        self.assertEqual(sorted(parsed.rows), trial_ids, text[-3000:])
        self.assertEqual(sorted(parsed.lines), trial_ids)
        # Used once: the same link logs no other browser in.
        parsed, text = self.rendered(link, "--ignore-certificate-errors")
        self.assertEqual(parsed.rows, [], text[-3000:])
        self.assertIn("unknown, used or expired", text)

        # A link to one trial (#trial=ID survives the login's redirect): its
        # details ask the head for its output, which a built-in trainable has
        # none of, and say so.
        link = client.dashboard_login()["url"] + "#trial=" + trial_ids[1]
        parsed, text = self.rendered(link, "--ignore-certificate-errors")
        self.assertIn("Trial " + trial_ids[1] + ": TERMINATED", text)
        self.assertRegex(text, r'id="output-note"[^>]*>[^<]*only process trainables write stdout')

        # The Python client's link, for a screenshot of the logged-in page.
        login = client.dashboard_login()
        self.assertEqual((login["login"], login["user"], login["expires_in_s"]),
                         (True, "admin", 60))
        self.screenshot(login["url"], "dashboard-login.png", "--ignore-certificate-errors")

    def test_dashboard_and_report_render_every_trial_in_a_browser(self):
        c = LocalCluster(self.addCleanup, "dash", insecure=True)
        c.start_head("--http-endpoint", "127.0.0.1:0")
        with open(os.path.join(c.dir, "endpoints.json")) as f:
            url = json.load(f)["http_endpoint"]
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+/$")
        c.start_worker("w0", 2)
        client = Client(c.client_endpoint, insecure=True, timeout_s=10)
        self.addCleanup(client.close)
        lrs = [0.05, 0.1, 0.2, 0.3]
        # A config string that would end the page's script if written raw.
        spec = {"name": "dash", "trainable": "quadratic",
                "param_space": {"lr": {"grid_search": lrs}, "x0": 10, "target": 0,
                                "note": "</script><b>bold</b>"},
                "metric": "loss", "mode": "min", "stop": {"training_iteration": 8}, "seed": 1}
        exp = client.submit(spec)
        self.assertTrue(client.wait(exp, poll_s=0.05, timeout_s=60)["finished"], c.logs())
        page = os.path.join(c.dir, "report.html")
        out = subprocess.run([client_cluster.CLI_BIN, "--head", c.client_endpoint, "--insecure",
                              "report", exp, "-o", page], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr.strip(), f"wrote {page} ({len(lrs)} trials, {len(lrs) * 8} results)")

        trial_ids = [f"{exp}_{i:05d}" for i in range(len(lrs))]
        # The same page twice: served live by the head, and as the report file.
        for where, name in ((url, "dashboard-live.png"), ("file://" + page, "dashboard-report.png")):
            with self.subTest(where=where):
                parsed, text = self.rendered(where)
                self.assertEqual(sorted(parsed.rows), trial_ids, text[-3000:])
                self.assertEqual(sorted(parsed.lines), trial_ids)  # one line per trial
                self.assertEqual(sorted(parsed.pc_lines), trial_ids)
                self.assertIn("</script><b>bold</b>", parsed.cells)  # text, not markup
                self.assertIn("TERMINATED", parsed.cells)
                self.screenshot(where, name)

        # Its data as JSON; requests addressed to another name are refused
        # (DNS rebinding), and so is an unknown experiment.
        with urllib.request.urlopen(url + "api/dashboard?experiment=" + exp, timeout=30) as r:
            data = json.load(r)
        self.assertEqual(data["experiment_id"], exp)
        self.assertEqual(sorted(data["series"]), trial_ids)
        self.assertEqual([len(data["series"][t]) for t in trial_ids], [8] * len(lrs))
        forged = urllib.request.Request(url, headers={"Host": "attacker.example:80"})
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=30)
        self.assertEqual(refused.exception.code, 403)
        with self.assertRaises(urllib.error.HTTPError) as unknown:
            urllib.request.urlopen(url + "api/dashboard?experiment=e0999", timeout=30)
        self.assertEqual(unknown.exception.code, 404)


if __name__ == "__main__":
    unittest.main()
