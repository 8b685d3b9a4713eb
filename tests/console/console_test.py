#!/usr/bin/env python3
"""The web console (collector/admin/console/) in a real browser against the real binaries.

Starts, on 127.0.0.1 only, an empty collector (no --config) with an admin token, a deliverer and
the demo receiver, then drives Debian's Chromium (headless, through chromedriver and Selenium)
through the console served at / on the collector's admin HTTP address:
  - sign-in: a wrong token shows the server's error; the right one is kept in sessionStorage only;
  - the setup flow: catalog (Webhooks) → a source created on the page (its write key copied from
    the page) → the receiver's URL with one header → the URL and header limits of the form →
    shared secret (show/hide) → enabled → save → "Send test event" shows status 200;
  - a real event sent with that write key to POST /v1/track reaches the receiver signed
    (X-Signature: verified);
  - the server's limits: a sixth URL (through the page's JSON editor) is refused naming `urls`
    and the limit; a reserved header (Content-Type) typed in the form is refused by the server,
    its error shown next to that header field; the stored destination is unchanged (GET);
  - the destinations page: disabling persists across a reload; Rotate secret refuses the secret
    in use (the server's error next to the field), then with a 1 h overlap shows when the
    previous secret stops signing, about 1 h ahead as the API (GET) has it;
  - the sources page: masked keys, Reveal, Rotate, then Revoke of the old key, after which ingest
    refuses the old key with 401 within 1 s;
  - the dead letters page renders its empty state;
  - the deletions page: an empty user id goes through the in-page confirmation step and is
    refused by the server, its error next to the user field; Cancel sends nothing; a confirmed
    request (user, a ticked source, a request id) shows the new record, is listed, is what the
    collector stored, and the re-enabled destination receives the signed `delete` event;
  - the audiences page: the trait name shown as the name is typed; a bad op refused, the
    server's error (rule.conditions[0].op) next to the conditions; conditions that are not JSON
    get the form's own hint; created through the form with a trait rule after an identify
    (plan: pro), listed with its trait and one member, the member gets the audience's signed
    identify; Sync now after a second user's identify updates the row (a new last sync, one
    entered, two members); Delete confirms in the row, Cancel keeps it, confirmed it is gone;
  - sign-out;
  - a second collector without an admin token, on loopback: the console skips the sign-in form
    and opens the page asked for (the setup page at /, Sources at #/sources), with no Sign out;
  - no script error nor Content-Security-Policy violation in the browser's console.
A 1280×800 PNG of every step goes to $TEST_OUTPUT_DIR (default: console-screenshots in the
test's temporary directory), named 01-login.png, 02-catalog.png, …

Usage: tests/console/run.sh   (or HOOKRELAY_BIN_DIR=<bazel-bin> python3 with selenium installed)
Network: 127.0.0.1 only (Chromium's resolver maps every other host to nothing); every wait is
bounded; every process is stopped with SIGTERM at the end.
"""

import base64
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONSOLE_DIR = os.path.join(ROOT, "collector/admin/console")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
SECRET = "console-shared-secret"
DEST_ID = "console-hook"
WIDTH, HEIGHT = 1280, 800

failures = []
passes = []


def check(ok, message):
    print(("PASS  " if ok else "FAIL  ") + message, flush=True)
    (passes if ok else failures).append(message)
    return ok


class Process:
    """A child whose output lines are collected; JSON log fields and text lines can be awaited."""

    def __init__(self, name, args, log_dir):
        self.name = name
        self.log_path = os.path.join(log_dir, name + ".log")
        self.log = open(self.log_path, "w")
        self.lines = []
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            self.log.write(line)
            self.log.flush()

    def field(self, name, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in list(self.lines):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and name in record:
                    return record[name]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no '{name}' in its log (see {self.log_path})")

    def find_line(self, *texts):
        for line in list(self.lines):
            if all(t in line for t in texts):
                return line
        return None

    def wait_line(self, *texts, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.find_line(*texts)
            if line is not None:
                return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(timeout=5)
        self.log.close()


def http(method, url, body=None, headers=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
            status, response_headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as e:
        payload = e.read()
        status, response_headers = e.code, dict(e.headers)
    try:
        parsed = json.loads(payload) if payload else None
    except ValueError:
        parsed = payload.decode(errors="replace")
    return status, parsed, response_headers


def basic(write_key):
    return {"Authorization": "Basic " + base64.b64encode(f"{write_key}:".encode()).decode()}


def wait_for(fn, timeout, interval=0.1):
    """fn() until it returns something truthy (exceptions count as not yet); None on timeout."""
    deadline = time.time() + timeout
    while True:
        try:
            value = fn()
            if value:
                return value
        except Exception:  # noqa: BLE001 (the page may be re-rendering)
            pass
        if time.time() >= deadline:
            return None
        time.sleep(interval)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def static_checks():
    """The console's files: no innerHTML, no inline handlers or scripts, nothing from elsewhere."""
    names = sorted(os.listdir(CONSOLE_DIR))
    check(set(names) >= {"index.html", "core.js", "main.js", "style.css"},
          f"collector/admin/console has index.html, core.js, main.js, style.css ({names})")
    text = {n: open(os.path.join(CONSOLE_DIR, n), encoding="utf-8").read() for n in names
            if n.endswith((".html", ".js", ".css"))}
    js = "\n".join(t for n, t in sorted(text.items()) if n.endswith(".js"))
    html = text.get("index.html", "")
    check(not re.search(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write", js),
          "the scripts never write HTML from strings (no innerHTML / insertAdjacentHTML)")
    check(not re.search(r"\son[a-z]+\s*=", html), "index.html has no inline event handler")
    check(not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html) and "<style" not in html
          and not re.search(r"\sstyle\s*=", html),
          "index.html has no inline script or style (CSP default-src 'self')")
    css = text.get("style.css", "")
    loads = re.findall(r"(?:src|href)\s*=\s*\"([^\"]*)\"", html)
    foreign = [u for u in loads if "//" in u or u.startswith("http")]
    foreign += re.findall(r"url\([^)]*\)|@import", css)
    foreign += re.findall(r"XMLHttpRequest|WebSocket|EventSource|importScripts|\bimport\(", js)
    fetches = re.findall(r"\bfetch\(([^,)]*)", js)
    check(not foreign and fetches == ["API + path"],
          f"the console loads nothing from elsewhere: one fetch, to /admin/v1 "
          f"({foreign or 'no foreign URL'}, fetch({', '.join(fetches)}))")
    check("localStorage" not in js, "the scripts do not use localStorage (the token is per tab)")


class Browser:
    def __init__(self, work, shots_dir):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={WIDTH},{HEIGHT}", "--no-first-run",
                    "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-default-apps", "--metrics-recording-only", "--mute-audio",
                    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                    f"--user-data-dir={os.path.join(work, 'chromium-profile')}"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        options.unhandled_prompt_behavior = "ignore"
        # Selenium picks chromedriver's port before chromedriver binds it: another process on the
        # machine can take it in between ("bind() failed: Address already in use" in
        # chromedriver.log, and chromedriver exits 1). Start again on a new port, 3 times at most.
        from selenium.common.exceptions import WebDriverException
        for attempt in range(1, 4):
            service = Service(executable_path=CHROMEDRIVER,
                              log_output=os.path.join(work, f"chromedriver-{attempt}.log"))
            try:
                self.driver = webdriver.Chrome(service=service, options=options)
                break
            except WebDriverException as e:
                if attempt == 3 or "unexpectedly exited" not in str(e):
                    raise
                print(f"chromedriver did not start (attempt {attempt}: {e.msg}); again",
                      flush=True)
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(30)
        # The screenshots are exactly 1280×800 CSS pixels at scale 1.
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        self.shots_dir = shots_dir
        self.shot_count = 0
        self.shots = []
        self.console = []

    def shot(self, name, element=None):
        if element is not None:
            self.driver.execute_script(
                "arguments[0].scrollIntoView({block: 'center', inline: 'nearest'});", element)
        else:
            self.driver.execute_script("window.scrollTo(0, 0);")
        time.sleep(0.25)
        self.shot_count += 1
        path = os.path.join(self.shots_dir, f"{self.shot_count:02d}-{name}.png")
        self.driver.save_screenshot(path)
        self.shots.append(path)
        return path

    def css(self, selector):
        from selenium.webdriver.common.by import By
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def css_all(self, selector):
        from selenium.webdriver.common.by import By
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def visible(self, selector, timeout=10):
        def probe():
            el = self.css(selector)
            return el if el.is_displayed() else None
        return wait_for(probe, timeout)

    def type(self, selector, text, clear=True):
        el = self.css(selector)
        if clear:
            el.clear()
        el.send_keys(text)
        return el

    def click(self, selector):
        el = self.css(selector)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
        el.click()
        return el

    def status_text(self):
        return self.css("#status").text

    def wait_status(self, needle, timeout=10):
        return wait_for(lambda: needle in self.status_text(), timeout)

    def go(self, base, fragment):
        self.driver.get(base + fragment)

    def collect_console(self):
        try:
            self.console.extend(self.driver.get_log("browser"))
        except Exception:  # noqa: BLE001
            pass

    def accept_confirm(self, timeout=5):
        from selenium.webdriver.support import expected_conditions as EC
        from selenium.webdriver.support.ui import WebDriverWait
        alert = WebDriverWait(self.driver, timeout).until(EC.alert_is_present())
        text = alert.text
        alert.accept()
        return text

    def unlabeled_controls(self):
        return self.driver.execute_script("""
          var out = [];
          document.querySelectorAll('input, select, textarea').forEach(function (el) {
            if (el.type === 'hidden') return;
            var named = (el.labels && el.labels.length) || el.getAttribute('aria-label') ||
              el.getAttribute('aria-labelledby');
            if (!named) out.push(el.outerHTML.slice(0, 120));
          });
          document.querySelectorAll('[onclick], [onchange], [onsubmit], [style]').forEach(
            function (el) { out.push('inline handler or style: ' + el.outerHTML.slice(0, 120)); });
          return out;""")


def run_flow(b, base, admin, http_port, receiver, receiver_url, token):
    from selenium.webdriver.support.ui import Select
    d = b.driver
    auth = {"Authorization": "Bearer " + token}

    def stored():
        status, body, _ = http("GET", f"{admin}/admin/v1/destinations/{DEST_ID}", headers=auth)
        return body if status == 200 else {"status": status, "body": body}

    def summary(dest):
        if not isinstance(dest, dict):
            return dest
        return {k: dest.get(k) for k in ("id", "sources", "enabled", "urls", "sharedSecretSet")}

    # 1. Sign in: a wrong token first.
    b.go(base, "")
    check(b.visible("#token") is not None, "the console shows the sign-in form at /")
    b.type("#token", "not-the-token")
    b.click("#sign-in")
    err = b.visible("#login-error")
    check(err is not None and err.text.strip() != "",
          f"a wrong token shows the server's error: {err.text.strip() if err else None!r}")
    check(d.execute_script("return location.hash") == "#/login", "still on the sign-in page")
    b.shot("login", err)
    check(d.execute_script("return sessionStorage.getItem('hookrelay.adminToken')") is None,
          "a refused token is not kept")

    b.type("#token", token)
    b.click("#sign-in")
    check(b.visible("#type-webhooks + label, label[for=type-webhooks]", 15) is not None,
          "signed in: the setup page shows the catalog")
    kept = d.execute_script("return [sessionStorage.getItem('hookrelay.adminToken'), "
                            "JSON.stringify(localStorage), document.cookie]")
    check(kept[0] == token and token not in kept[1] and token not in kept[2],
          "the token is kept in sessionStorage only")
    type_label = b.css("label[for=type-webhooks]")
    check("Webhooks" in type_label.text, f"the catalog offers Webhooks ({type_label.text!r})")
    steps_hidden = not b.css("#url-rows").is_displayed()
    b.click("label[for=type-webhooks]")
    check(steps_hidden and b.css("#url-rows").is_displayed(),
          "choosing Webhooks reveals the next steps")
    headings = [h.text for h in b.css_all("section.step h2")]
    check(len(headings) == 6, f"six step headings: {headings}")
    b.shot("catalog")

    # 2. A source created on the page; its write key copied from the page.
    b.type("#new-source-name", "Console shop")
    Select(b.css("#new-source-kind")).select_by_value("server")
    b.click("#create-source")
    key_input = b.visible("#new-write-key", 10)
    write_key = key_input.get_attribute("value") if key_input else ""
    check(bool(write_key), f"the new source's write key is shown ({len(write_key)} characters)")
    checked = [c.get_attribute("value") for c in b.css_all("input.source-choice")
               if c.is_selected()]
    check(len(checked) == 1, f"the new source is selected ({checked})")
    source_id = checked[0] if checked else ""
    b.click("#new-key-panel button.copy-key")
    check(wait_for(lambda: "opied" in b.status_text() or "copy" in b.status_text(), 5),
          f"Copy answers in the status region ({b.status_text()!r})")
    b.shot("source", b.css("#new-key-panel"))

    # 3. URLs: the receiver's, with one header; the form's limits.
    row0 = "fieldset.url-row[data-url-index='0']"
    b.type(f"{row0} input.url-input", receiver_url + "hooks")
    b.click(f"{row0} button.add-header")
    b.type(f"{row0} .header-row[data-header-index='0'] input.header-name", "X-Api-Key")
    b.type(f"{row0} .header-row[data-header-index='0'] input.header-value", "demo")
    for _ in range(4):
        b.click("#add-url")
    rows = b.css_all("fieldset.url-row")
    add_url = b.css("#add-url")
    note = b.css("#url-limit-note")
    check(len(rows) == 5 and not add_url.is_enabled() and note.is_displayed()
          and "at most 5 URLs" in note.text,
          f"Add URL stops at 5 rows with the note ({len(rows)} rows, note {note.text!r})")
    row1 = "fieldset.url-row[data-url-index='1']"
    for _ in range(5):
        b.click(f"{row1} button.add-header")
    headers_1 = b.css_all(f"{row1} .header-row")
    add_header = b.css(f"{row1} button.add-header")
    check(len(headers_1) == 5 and not add_header.is_enabled()
          and "at most 5 headers" in b.css(f"{row1} .limit-note").text,
          f"Add header stops at 5 per URL ({len(headers_1)} rows)")
    # A bad scheme: a hint on blur, not a block.
    b.type(f"{row1} input.url-input", "ftp://example.com/x")
    b.click(f"{row1} .header-row[data-header-index='0'] input.header-name")
    url_error = "#" + b.css(f"{row1} input.url-input").get_attribute("id") + "-error"
    hint = wait_for(lambda: b.css(url_error).is_displayed() and b.css(url_error), 5)
    check(bool(hint) and "http" in hint.text and hint.get_attribute("data-source") == "client",
          f"the form hints at a bad URL scheme on blur ({hint.text if hint else None!r})")
    b.shot("urls", b.css(row1))
    for _ in range(4):
        b.click("fieldset.url-row[data-url-index='1'] button.remove-url")
    rows = b.css_all("fieldset.url-row")
    check(len(rows) == 1 and b.css("#add-url").is_enabled(),
          f"Remove URL goes back to one row ({len(rows)})")
    check(b.css(f"{row0} input.url-input").get_attribute("value") == receiver_url + "hooks",
          "the first row kept its URL")

    # 4. Shared secret with show/hide.
    secret = b.type("#shared-secret", SECRET)
    check(secret.get_attribute("type") == "password", "the shared secret is a password field")
    b.click("#toggle-secret")
    check(secret.get_attribute("type") == "text" and
          b.css("#toggle-secret").get_attribute("aria-pressed") == "true",
          "Show reveals the shared secret")
    b.shot("secret", secret)
    b.click("#toggle-secret")
    check(secret.get_attribute("type") == "password", "Hide masks it again")

    # 5. Id, enabled, save.
    b.type("#destination-id", DEST_ID)
    enabled = b.css("#destination-enabled")
    if not enabled.is_selected():
        b.click("label[for=destination-enabled]")
    check(enabled.is_selected(), "the Enabled switch is on")
    b.click("#save-destination")
    saved = b.wait_status("destination " + DEST_ID, 15)
    check(bool(saved), f"Save creates the destination ({b.status_text()!r})")
    check(d.execute_script("return location.hash") == "#/setup/" + DEST_ID,
          "the page switches to editing the saved destination")
    dest = stored()
    check(isinstance(dest, dict) and dest.get("enabled") is True and
          dest.get("sources") == [source_id] and dest.get("sharedSecretSet") is True and
          dest.get("urls") == [{"url": receiver_url + "hooks", "headers": {"X-Api-Key": "demo"}}],
          f"the stored destination is what the form said: {summary(dest)}")
    check(isinstance(dest, dict) and not dest.get("sharedSecret") and SECRET not in json.dumps(dest),
          "reads never show the shared secret (sharedSecretSet only)")
    b.shot("saved", b.css("#save-destination"))

    # 6. Test event: status 200 in the results table.
    b.click("#send-test")
    cell = wait_for(lambda: b.css("#test-results tbody tr td.cell-status"), 20)
    status_text = cell.text.strip() if cell else ""
    check(status_text == "200", f"the test event's result row shows status 200 ({status_text!r})")
    outcome = b.css("#test-outcome").text if cell else ""
    check("delivered" in outcome, f"the test outcome is delivered ({outcome!r})")
    latency = b.css("#test-results tbody tr td.cell-latency").text if cell else ""
    check(re.fullmatch(r"\d+ ms", latency) is not None, f"the latency is shown ({latency!r})")
    m = re.search(r"messageId (\S+)", outcome)
    if m:
        line = receiver.wait_line(m.group(1), "X-Signature: verified", timeout=5)
        check(line is not None, f"the receiver got the test event {m.group(1)}, signature verified")
    b.shot("test-event", b.css("#test-output"))

    # 7. A real event with the write key copied from the page.
    status, body, _ = http("POST", f"http://127.0.0.1:{http_port}/v1/track",
                           {"userId": "u1", "event": "Console Test", "messageId": "console-1"},
                           basic(write_key))
    check(status == 200, f"ingest accepts the event with the page's write key ({status} {body})")
    line = receiver.wait_line("console-1", timeout=20)
    check(line is not None and "X-Signature: verified" in line,
          f"the receiver got console-1 with a verified signature: {(line or '').strip()!r}")

    before = summary(stored())

    # 8. A sixth URL, through the page's JSON editor (the form stops at five).
    b.click("#json-editor summary")
    six = {"urls": [{"url": f"{receiver_url}hooks/{i}"} for i in range(6)]}
    area = b.css("#json-body")
    d.execute_script("arguments[0].value = arguments[1];", area, json.dumps(six, indent=2))
    b.click("#json-send")
    box = b.visible("#json-error", 10)
    text = box.text if box else ""
    check(box is not None and "urls" in text and "5" in text,
          f"a sixth URL is refused naming urls and the limit: {text!r}")
    b.shot("sixth-url-refused", box or area)
    check(summary(stored()) == before, "the stored destination is unchanged after the 6th URL")
    b.click("#json-editor summary")

    # 9. A reserved header through the form: the server's error next to that header field.
    b.driver.refresh()
    check(b.visible(f"{row0} input.url-input", 15) is not None, "the edit page reloads")
    check(b.css("#shared-secret").get_attribute("placeholder") == "unchanged",
          "editing: the secret field is empty with placeholder 'unchanged'")
    b.click(f"{row0} button.add-header")
    hdr = f"{row0} .header-row[data-header-index='1']"
    b.type(f"{hdr} input.header-name", "Content-Type")
    b.type(f"{hdr} input.header-value", "text/plain")
    name_input = b.css(f"{hdr} input.header-name")
    name_error = "#" + name_input.get_attribute("id") + "-error"  # its aria-describedby line
    b.click(f"{hdr} input.header-value")  # blur: the form's own hint
    client = wait_for(lambda: b.css(name_error).is_displayed() and b.css(name_error), 5)
    check(bool(client) and client.get_attribute("data-source") == "client",
          f"the form hints that Content-Type is reserved ({client.text if client else None!r})")
    b.click("#save-destination")
    server_err = wait_for(lambda: (lambda e: e if e.get_attribute("data-source") == "server" and
                                   e.is_displayed() else None)(b.css(name_error)), 10)
    described = (name_input.get_attribute("aria-describedby") or "").split()
    check(bool(server_err) and "reserved" in server_err.text.lower() and
          server_err.get_attribute("id") in described and
          name_input.get_attribute("aria-invalid") == "true",
          f"the server's error is shown next to the Content-Type field: "
          f"{server_err.text if server_err else None!r}")
    check(b.css("#form-error").is_displayed(), "the form's error summary is shown at the top")
    b.shot("reserved-header", b.css(hdr))
    after = summary(stored())
    check(after == before, f"the stored destination is unchanged: {after}")

    # 10. Destinations page: the list (with the protection set through the API), then disable and
    # reload.
    status, _, _ = http("PATCH", f"{admin}/admin/v1/destinations/{DEST_ID}",
                        {"options": {"rateLimitPerSecond": 50, "circuitBreaker": {"failures": 5}}},
                        auth)
    check(status == 200, f"the API sets a rate limit and a circuit breaker ({status})")
    b.go(base, "#/destinations")
    row_sel = f"tr[data-destination-id='{DEST_ID}']"
    row = b.visible(row_sel, 10)
    check(row is not None, "the destinations page lists the destination")
    prot = b.css(f"{row_sel} td.cell-protection")
    prot_text = prot.text if prot else ""
    check("closed" in prot_text and "limit" in prot_text and "in flight" in prot_text and
          "≤ 50/s" in prot_text and "breaker after 5 failures" in prot_text,
          f"the Protection column shows the breaker state, limit and options: {prot_text!r}")
    toggle = b.css(f"{row_sel} input.enabled-toggle")
    check(toggle.is_selected(), "its Enabled toggle is on")
    cells = [c.text for c in b.css_all(f"{row_sel} td")]
    check(len(cells) >= 9 and cells[3] == "1" and source_id in cells[2],
          f"the row shows sources and URL count: {cells[:9]}")
    b.shot("destinations", row)
    b.click(f"{row_sel} label.switch")
    check(bool(b.wait_status("Disabled " + DEST_ID, 10)),
          f"the toggle disables the destination ({b.status_text()!r})")
    b.driver.refresh()
    row = b.visible(row_sel, 10)
    toggle = b.css(f"{row_sel} input.enabled-toggle") if row else None
    check(toggle is not None and not toggle.is_selected(), "after a reload the toggle is off")
    check((stored() or {}).get("enabled") is False, "the stored destination is disabled")
    b.shot("disabled", row)

    # 10a. Rotating the shared secret from the destinations page (SPEC §5.4): the secret in use
    # is refused, the server's error next to the new secret's field; a new one with a 1 h overlap
    # shows when the overlap ends, as the API has it. The previous secret (SECRET) still makes
    # X-Signature for that hour, so the receiver goes on verifying the later events.
    b.click(f"{row_sel} button.rotate-secret")
    form = b.visible("#rotate-form", 5)
    new_secret_in = b.css("#rotate-new-secret") if form else None
    overlap_in = Select(b.css("#rotate-overlap")) if form else None
    check(form is not None and new_secret_in.get_attribute("type") == "password" and
          overlap_in.first_selected_option.get_attribute("value") == "86400s" and
          "set" in b.css("#rotation-state").text and "until" not in b.css("#rotation-state").text,
          "Rotate secret opens a form: a password field, a 24 h overlap by default, the secret "
          f"shown as set ({b.css('#rotation-state').text if form else None!r})")
    b.type("#rotate-new-secret", SECRET)
    b.click("#rotate-submit")
    same = wait_for(lambda: b.css("#rotate-new-secret-error").is_displayed() and
                    b.css("#rotate-new-secret-error"), 10)
    box = b.css("#rotate-error")
    check(bool(same) and "the same as the secret in use" in same.text and
          same.get_attribute("data-source") == "server" and box.is_displayed() and
          "sharedSecret" in box.text and
          new_secret_in.get_attribute("aria-invalid") == "true",
          f"the secret in use is refused next to the new secret's field "
          f"({same.text if same else None!r}; {box.text!r})")
    check("rotation" not in (stored() or {}), "the refused rotation changed nothing (GET)")
    b.shot("secret-rotate-refused", b.css("#rotate-secret"))
    b.type("#rotate-new-secret", "console-rotated-secret")
    overlap_in.select_by_value("3600s")
    b.click("#rotate-submit")
    check(bool(b.wait_status("Rotated the shared secret of " + DEST_ID, 10)),
          f"the rotation is announced ({b.status_text()!r})")
    shown = wait_for(lambda: "until" in b.css("#rotation-state").text and
                     b.css("#rotation-state time"), 10)
    ends = ((stored() or {}).get("rotation") or {}).get("endsAt", "")
    try:
        ends_at = datetime.datetime.fromisoformat(ends).timestamp()
    except ValueError:
        ends_at = 0
    check(abs(ends_at - (time.time() + 3600)) < 120,
          f"the API's rotation.endsAt is about 1 h ahead ({ends!r})")
    shown_at = 0
    if shown:
        try:
            shown_at = datetime.datetime.fromisoformat(shown.get_attribute("datetime")).timestamp()
        except ValueError:
            pass
    check(bool(shown) and abs(shown_at - ends_at) < 1 and
          "the previous secret also signs until" in b.css("#rotation-state").text,
          f"the form shows the end of the overlap ({b.css('#rotation-state').text!r})")
    note = wait_for(lambda: b.css(f"{row_sel} .rotation-note"), 10)
    check(bool(note) and "previous secret also signs until" in note.text and
          note.find_element("css selector", "time").get_attribute("datetime") ==
          shown.get_attribute("datetime"),
          f"the list's row shows the overlap too ({note.text if note else None!r})")
    check(b.css("#rotate-new-secret").get_attribute("value") == "" and
          "console-rotated-secret" not in d.page_source and SECRET not in d.page_source,
          "the page shows neither secret after the rotation")
    b.shot("secret-rotated", b.css("#rotate-secret"))

    # 10a2. A new secret on the edit page goes in with an overlap too: the rotation under way is
    # shown; the secret in use is refused next to the secret field (the other changes saved); a
    # new one with 7 days rotates (the API's endsAt a week ahead); "None" replaces it at once
    # (back to SECRET alone, which the receiver verifies in the later steps).
    def rotation_ends():
        return ((stored() or {}).get("rotation") or {}).get("endsAt", "")

    def ends_ts(value):
        try:
            return datetime.datetime.fromisoformat(value).timestamp()
        except ValueError:
            return 0

    before_ends = rotation_ends()
    b.go(base, f"#/setup/{DEST_ID}")
    wrap = b.visible("#secret-rotation", 15)
    state = b.css("#secret-rotation-state")
    state_time = state.find_elements("css selector", "time") if wrap else []
    check(wrap is not None and "previous secret also signs until" in state.text and
          bool(state_time) and abs(ends_ts(state_time[0].get_attribute("datetime")) -
                                   ends_ts(before_ends)) < 1 and
          Select(b.css("#secret-overlap")).first_selected_option.get_attribute("value") == "86400s",
          f"the edit page shows the rotation under way and a 24 h overlap by default "
          f"({state.text if wrap else None!r})")
    b.type("#shared-secret", "console-rotated-secret")
    b.click("#save-destination")
    same = wait_for(lambda: (lambda e: e if e.is_displayed() and
                             e.get_attribute("data-source") == "server" else None)(
        b.css("#shared-secret-error")), 10)
    check(bool(same) and "the same as the secret in use" in same.text and
          "refused the new shared secret" in b.css("#form-error").text,
          f"the secret in use is refused next to the secret field "
          f"({same.text if same else None!r}; {b.css('#form-error').text!r})")
    check(rotation_ends() == before_ends, "the refused secret left the rotation as it was")
    b.shot("edit-secret-refused", b.css("#secret-rotation"))
    b.type("#shared-secret", "console-third-secret")
    Select(b.css("#secret-overlap")).select_by_value("604800s")
    b.click("#save-destination")
    check(bool(b.wait_status("previous shared secret also signs until", 10)),
          f"saving rotates the secret and says until when ({b.status_text()!r})")
    check(abs(ends_ts(rotation_ends()) - (time.time() + 7 * 86400)) < 120,
          f"the API's rotation now ends a week ahead ({rotation_ends()!r})")
    shown_new = wait_for(lambda: b.css("#secret-rotation-state time"), 10)
    check(bool(shown_new) and abs(ends_ts(shown_new.get_attribute("datetime")) -
                                  ends_ts(rotation_ends())) < 1 and
          b.css("#shared-secret").get_attribute("value") == "" and
          "console-third-secret" not in d.page_source,
          "the form shows the new end, and neither secret")
    b.shot("edit-secret-rotated", b.css("#secret-rotation"))
    b.type("#shared-secret", SECRET)
    Select(b.css("#secret-overlap")).select_by_value("0s")
    b.click("#save-destination")
    check(bool(b.wait_status("Saved destination " + DEST_ID, 10)) and
          "also signs" not in b.status_text(), f"None saves at once ({b.status_text()!r})")
    check(wait_for(lambda: "rotation" not in (stored() or {"rotation": 1}), 10) is True and
          (stored() or {}).get("sharedSecretSet") is True,
          "with None the new secret replaces the old one: no rotation left (GET)")

    # 10b. Protection in the edit form: the stored options are shown; a refused value is
    # explained next to its field; a good one is saved without touching the other options.
    stored_before = stored() or {}
    b.go(base, f"#/setup/{DEST_ID}")
    rate = b.visible("#rate-limit", 15)
    check(b.css("#protection-options").get_attribute("open") is not None,
          "the protection section is open when options are set")
    check(rate is not None and rate.get_attribute("value") == "50" and
          b.css("#breaker-failures").get_attribute("value") == "5",
          "the edit form shows the stored rate limit (50) and breaker (5)")
    b.type("#rate-limit", "200000")
    b.click("#save-destination")
    rate_err = wait_for(lambda: (lambda e: e if e.is_displayed() and
                                 e.get_attribute("data-source") == "server" else None)(
        b.css("#rate-limit-error")), 10)
    check(bool(rate_err) and "100000" in rate_err.text,
          f"a rate limit over the maximum is refused next to its field: "
          f"{rate_err.text if rate_err else None!r}")
    b.shot("rate-limit-refused", b.css("#protection-options"))
    check((stored() or {}).get("options") == stored_before.get("options"),
          "the refused save changed nothing")
    b.type("#rate-limit", "25")
    b.click("#save-destination")
    saved_opts = wait_for(lambda: (lambda o: o if o.get("rateLimitPerSecond") == 25 else None)(
        (stored() or {}).get("options") or {}), 10)
    want_opts = dict(stored_before.get("options") or {}, rateLimitPerSecond=25)
    check(saved_opts == want_opts,
          f"the form saved the rate limit and kept the other options: {saved_opts}")

    # 10b'. Batched webhooks in the edit form (SPEC §5.4): off, the section is closed and the
    # limits hidden; ticked, they show the defaults with their ranges as hints; saved with 10
    # events and 200 ms, the API has options.batch with the default maxBytes and the other options
    # kept; the list shows it; an out-of-range value gets a hint naming the field and its limit on
    # blur, and the collector's refusal next to the field; unticked and saved, batch is gone.
    from selenium.webdriver.common.keys import Keys
    opts_before = (stored() or {}).get("options") or {}
    check("batch" not in opts_before, f"the destination starts without batching: {opts_before}")
    b.go(base, f"#/setup/{DEST_ID}")
    batch_on = b.visible("#batch-options summary", 15) and b.css("#batch-enabled")
    check(bool(batch_on) and b.css("#batch-options").get_attribute("open") is None and
          not batch_on.is_selected() and not b.css("#batch-fields").is_displayed(),
          "the batch section is closed, unticked, its limits hidden, while there is no batch")
    b.click("#batch-options summary")
    b.click("label[for=batch-enabled]")
    shown = wait_for(lambda: b.css("#batch-fields").is_displayed(), 5)
    defaults = {sel: b.css(sel).get_attribute("value")
                for sel in ("#batch-max-events", "#batch-max-bytes", "#batch-max-wait-ms")}
    check(bool(shown) and batch_on.is_selected() and defaults == {
        "#batch-max-events": "100", "#batch-max-bytes": "500000", "#batch-max-wait-ms": "1000"},
          f"ticking 'Send several events per request' shows the limits with the defaults "
          f"({defaults})")
    hints = {sel: b.css(sel + "-hint").text
             for sel in ("#batch-max-events", "#batch-max-bytes", "#batch-max-wait-ms")}
    check("1 to 1,000" in hints["#batch-max-events"] and
          "1,000 to 500,000" in hints["#batch-max-bytes"] and
          "10 to 10,000" in hints["#batch-max-wait-ms"] and
          all(f"{sel[1:]}-hint" in b.css(sel).get_attribute("aria-describedby") for sel in hints),
          f"each limit's range is its hint, tied to the field: {hints}")
    labels = [b.css(f"label[for={i}]").text for i in
              ("batch-enabled", "batch-max-events", "batch-max-bytes", "batch-max-wait-ms")]
    check(all(labels) and labels[0] == "Send several events per request",
          f"the checkbox and the three fields are labelled: {labels}")
    b.type("#batch-max-events", "10")
    b.type("#batch-max-wait-ms", "200")
    b.shot("batch-on", b.css("#batch-options"))
    b.click("#save-destination")
    want_batch = {"maxEvents": 10, "maxBytes": 500000, "maxWaitMs": 200}
    got_opts = wait_for(lambda: (lambda o: o if o.get("batch") else None)(
        (stored() or {}).get("options") or {}), 10)
    check(bool(got_opts) and got_opts.get("batch") == want_batch,
          f"the form saved options.batch {want_batch}: {got_opts and got_opts.get('batch')}")
    check(bool(got_opts) and dict(got_opts, batch=None) == dict(opts_before, batch=None),
          f"the other options are kept: {got_opts}")
    b.go(base, "#/destinations")
    batch_line = wait_for(lambda: b.css(
        f"tr[data-destination-id='{DEST_ID}'] td.cell-protection .batching"), 10)
    check(bool(batch_line) and batch_line.text == "batches ≤ 10 / 200 ms",
          f"the Protection column shows the batching ({batch_line.text if batch_line else None!r})")
    b.go(base, f"#/setup/{DEST_ID}")
    events_in = b.visible("#batch-max-events", 15)
    check(events_in is not None and b.css("#batch-enabled").is_selected() and
          b.css("#batch-options").get_attribute("open") is not None and
          events_in.get_attribute("value") == "10" and
          b.css("#batch-max-bytes").get_attribute("value") == "500000" and
          b.css("#batch-max-wait-ms").get_attribute("value") == "200",
          "the edit form shows the stored batch (ticked; 10 events, 500000 bytes, 200 ms)")
    b.type("#batch-max-events", "1001").send_keys(Keys.TAB)
    hint = wait_for(lambda: (lambda e: e if e.is_displayed() else None)(
        b.css("#batch-max-events-error")), 5)
    check(bool(hint) and hint.get_attribute("data-source") == "client" and
          "maxEvents" in hint.text and "1 to 1,000" in hint.text,
          f"1001 events gets a hint on blur naming the field and its limit: "
          f"{hint.text if hint else None!r}")
    b.click("#save-destination")
    batch_err = wait_for(lambda: (lambda e: e if e.is_displayed() and
                                  e.get_attribute("data-source") == "server" else None)(
        b.css("#batch-max-events-error")), 10)
    check(bool(batch_err) and "1000" in batch_err.text and
          b.css("#batch-max-events").get_attribute("aria-invalid") == "true" and
          "One field is marked below" in b.css("#form-error").text,
          f"the collector refuses 1001 events next to the field: "
          f"{batch_err.text if batch_err else None!r}; {b.css('#form-error').text!r}")
    b.shot("batch-refused", b.css("#batch-options"))
    check(((stored() or {}).get("options") or {}).get("batch") == want_batch,
          "the refused save changed nothing")
    b.click("label[for=batch-enabled]")
    check(not b.css("#batch-enabled").is_selected() and
          not b.css("#batch-fields").is_displayed(), "unticked, the limits are hidden")
    b.click("#save-destination")
    unbatched = wait_for(lambda: (lambda o: [o] if "batch" not in o else None)(
        (stored() or {}).get("options") or {}), 10)
    check(bool(unbatched) and unbatched[0] == opts_before,
          f"unticked and saved, options.batch is gone and the rest kept: {unbatched}")

    # 10b'. Per-user order: ticked and saved, options.ordering is "per_user" with the rest kept;
    # the list says so; unticked and saved, it is gone.
    b.go(base, f"#/setup/{DEST_ID}")
    order_on = b.visible("#ordering-options summary", 15) and b.css("#ordering-per-user")
    check(bool(order_on) and not order_on.is_selected() and
          b.css("#ordering-options").get_attribute("open") is None,
          "the order section is closed and unticked while the destination keeps no order")
    b.click("#ordering-options summary")
    b.click("label[for=ordering-per-user]")
    b.click("#save-destination")
    ordered = wait_for(lambda: (lambda o: o if o.get("ordering") else None)(
        (stored() or {}).get("options") or {}), 10)
    check(bool(ordered) and ordered.get("ordering") == "per_user" and
          dict(ordered, ordering=None) == dict(opts_before, ordering=None),
          f"the form saved options.ordering per_user and kept the rest: {ordered}")
    b.go(base, "#/destinations")
    order_line = wait_for(lambda: b.css(
        f"tr[data-destination-id='{DEST_ID}'] td.cell-protection .ordering"), 10)
    check(bool(order_line) and order_line.text == "in order per user",
          f"the Protection column shows the order ({order_line.text if order_line else None!r})")
    b.go(base, f"#/setup/{DEST_ID}")
    order_on = b.visible("#ordering-options summary", 15) and b.css("#ordering-per-user")
    check(bool(order_on) and order_on.is_selected() and
          b.css("#ordering-options").get_attribute("open") is not None,
          "the edit form shows the stored order (ticked, open)")
    b.shot("ordering-on", b.css("#ordering-options"))
    b.click("label[for=ordering-per-user]")
    b.click("#save-destination")
    # The API reads every option, an empty ordering included.
    unordered = wait_for(lambda: (lambda o: [o] if not o.get("ordering") else None)(
        (stored() or {}).get("options") or {}), 10)
    check(bool(unordered) and unordered[0] == opts_before,
          f"unticked and saved, options.ordering is empty and the rest kept: {unordered}")

    # 10c. The filter in the edit form: types, event names and a condition saved as the API's
    # JSON; a refused condition explained next to its value field; the test says which part of
    # the filter refuses the sample; emptied, the filter lets everything through again.
    b.go(base, f"#/setup/{DEST_ID}")
    check(b.visible("#filter-options summary", 15) is not None, "the form has a filter section")
    check(b.css("#filter-options").get_attribute("open") is None,
          "the filter section is closed while there is no filter")
    b.click("#filter-options summary")
    b.click("label[for=filter-type-track]")
    b.type("#filter-events", "Console *")
    b.click("#filter-add-condition")
    cond0 = "#filter-where .filter-row[data-index='0']"
    b.type(f"{cond0} input.filter-path", "properties.plan")
    Select(b.css(f"{cond0} select.filter-op")).select_by_value("in")
    b.type(f"{cond0} input.filter-value", "pro, team, 3")
    b.click("#save-destination")
    want_filter = {"types": ["track"], "events": ["Console *"],
                   "where": [{"path": "properties.plan", "op": "in", "value": ["pro", "team", 3]}]}
    got_filter = wait_for(lambda: (lambda f: f if f.get("where") else None)(
        (stored() or {}).get("filter") or {}), 10)
    check(got_filter == want_filter, f"the form saved the filter as the API's JSON: {got_filter}")
    b.click("#filter-add-condition")
    cond1 = "#filter-where .filter-row[data-index='1']"
    b.type(f"{cond1} input.filter-path", "properties.total")
    Select(b.css(f"{cond1} select.filter-op")).select_by_value("gt")
    b.type(f"{cond1} input.filter-value", "lots")
    b.click("#save-destination")
    value_error = "#" + b.css(f"{cond1} input.filter-value").get_attribute("id") + "-error"
    cond_err = wait_for(lambda: (lambda e: e if e.is_displayed() and
                                 e.get_attribute("data-source") == "server" else None)(
        b.css(value_error)), 10)
    check(bool(cond_err) and "compares numbers" in cond_err.text and
          b.css(f"{cond1} input.filter-value").get_attribute("aria-invalid") == "true",
          f"a condition the collector refuses is explained next to its value: "
          f"{cond_err.text if cond_err else None!r}")
    b.shot("filter-refused", b.css("#filter-options"))
    check(((stored() or {}).get("filter") or {}) == want_filter, "the refused save changed nothing")
    b.click(f"{cond1} button.filter-remove")
    b.click("#send-test")
    verdict = wait_for(lambda: b.css("#test-filter"), 20)
    verdict_text = verdict.text if verdict else ""
    check("refused by events" in verdict_text and "Test Event" in verdict_text,
          f"the test says the sample is refused by the event names: {verdict_text!r}")
    b.shot("filter-test", b.css("#test-output"))
    b.driver.refresh()
    check(b.visible("#filter-events", 15) is not None and
          b.css("#filter-options").get_attribute("open") is not None and
          b.css("#filter-events").get_attribute("value") == "Console *" and
          b.css("#filter-type-track").is_selected() and
          b.css(f"{cond0} input.filter-value").get_attribute("value") == "pro, team, 3",
          "after a reload the form shows the stored filter")
    b.shot("filter", b.css("#filter-options"))
    b.click("label[for=filter-type-track]")
    b.type("#filter-events", "")
    b.click(f"{cond0} button.filter-remove")
    b.click("#save-destination")
    emptied = wait_for(lambda: (lambda f: [f] if not f.get("where") else None)(
        (stored() or {}).get("filter") or {}), 10)
    check(bool(emptied) and not emptied[0].get("types") and not emptied[0].get("events"),
          f"an emptied filter is saved as no filter: {emptied}")

    # 11. Sources page: masked keys, Reveal, Rotate, Revoke the old key.
    b.go(base, "#/sources")
    src_sel = f"tr[data-source-id='{source_id}']"
    row = b.visible(src_sel, 10)
    check(row is not None, "the sources page lists the new source")
    code = b.css(f"{src_sel} code.key")
    check(code.text != write_key and "•" in code.text and
          code.text.startswith(write_key[:4]), f"the write key is masked ({code.text!r})")
    b.click(f"{src_sel} button.reveal-key")
    check(code.text == write_key, "Reveal shows the whole key")
    b.shot("sources", row)
    b.click(f"{src_sel} button.rotate-key")
    new_input = b.visible("#rotated-write-key", 10)
    new_key = new_input.get_attribute("value") if new_input else ""
    check(bool(new_key) and new_key != write_key, "Rotate shows a new write key")
    status, _, _ = http("POST", f"http://127.0.0.1:{http_port}/v1/track",
                        {"userId": "u1", "event": "Console Test", "messageId": "console-2"},
                        basic(new_key))
    check(status == 200, f"ingest accepts the new key ({status})")
    b.shot("rotated", b.css("#rotate-panel"))
    b.click("#rotate-panel button.revoke-old-key")
    prompt = b.accept_confirm()
    check("Revoke" in prompt, f"revoking asks for confirmation ({prompt!r})")
    revoked = b.wait_status("Revoked", 10)
    t_revoked = time.time()
    check(bool(revoked), f"the old key is revoked ({b.status_text()!r})")
    refused = None
    while time.time() < t_revoked + 1.0:
        status, _, _ = http("POST", f"http://127.0.0.1:{http_port}/v1/track",
                            {"userId": "u1", "event": "Console Test", "messageId": "console-3"},
                            basic(write_key), timeout=2)
        if status == 401:
            refused = time.time() - t_revoked
            break
        time.sleep(0.05)
    check(refused is not None, "ingest refuses the revoked key with 401 within 1 s"
          + (f" ({refused * 1000:.0f} ms)" if refused is not None else ""))
    status, _, _ = http("POST", f"http://127.0.0.1:{http_port}/v1/track",
                        {"userId": "u1", "event": "Console Test", "messageId": "console-4"},
                        basic(new_key))
    check(status == 200, f"the new key still works ({status})")
    keys = wait_for(lambda: len(b.css_all(f"{src_sel} code.key")) == 1, 5)
    check(bool(keys), "the sources page shows one key left")
    b.shot("revoked", b.css(src_sel))

    # 12. Dead letters: the empty state (the receiver answered 200 to everything).
    b.go(base, "#/dead-letters")
    empty = b.visible("#dead-letters-empty", 10)
    check(empty is not None and "No dead letters" in empty.text,
          f"the dead letters page shows its empty state ({empty.text if empty else None!r})")
    check(len(b.css_all("#dl-destination option")) >= 2,
          "the dead letters filter lists the destinations")
    b.shot("dead-letters")
    missing = b.unlabeled_controls()
    check(not missing, f"every control on the dead letters page has a label ({missing})")
    for page in ("#/setup", "#/sources", "#/destinations", "#/deletions", "#/audiences"):
        b.go(base, page)
        wait_for(lambda: b.css("h1"), 5)
        time.sleep(0.5)
        missing = b.unlabeled_controls()
        check(not missing, f"every control on {page} has a label ({missing})")

    # 13. Deletion requests: an in-page confirmation step before anything is sent; the server's
    # error next to the user field; the new record shown and listed; the (re-enabled) destination
    # gets the signed `delete` event.
    def deletions():
        status, body, _ = http("GET", f"{admin}/admin/v1/deletions", headers=auth)
        return (body or {}).get("deletions", []) if status == 200 else None

    status, _, _ = http("PATCH", f"{admin}/admin/v1/destinations/{DEST_ID}", {"enabled": True},
                        auth)
    check(status == 200, f"the destination is enabled again for the deletion ({status})")
    b.go(base, "#/deletions")
    user_in = b.visible("#deletion-user", 10)
    check(user_in is not None, "the deletions page shows the create form")
    source_box = wait_for(lambda: b.css(f"#deletion-source-{source_id}"), 10)
    check(source_box is not None and not source_box.is_selected(),
          "the form offers the sources as checkboxes, none ticked")
    empty = wait_for(lambda: b.css("#deletions-empty"), 10)
    check(empty is not None and "No deletion requests" in empty.text,
          f"the list shows its empty state ({empty.text if empty else None!r})")
    check(deletions() == [], "the collector has no deletion request yet")

    # An empty user id: the confirmation step, then the server's refusal next to the field.
    b.click("#deletion-review")
    panel = b.visible("#deletion-confirm-panel", 5)
    check(panel is not None and "cannot be undone" in panel.text and not user_in.is_enabled(),
          "Review shows the confirmation step (fields locked) before sending anything")
    check(deletions() == [], "nothing is sent before the confirmation")
    b.click("#deletion-confirm")
    user_err = wait_for(lambda: (lambda e: e if e.is_displayed() and
                                 e.get_attribute("data-source") == "server" else None)(
        b.css("#deletion-user-error")), 10)
    described = (user_in.get_attribute("aria-describedby") or "").split()
    check(bool(user_err) and user_err.text.strip() != "" and "deletion-user-error" in described
          and user_in.get_attribute("aria-invalid") == "true" and user_in.is_enabled(),
          f"the server's error is shown next to the user id field: "
          f"{user_err.text if user_err else None!r}")
    check(b.css("#deletion-form-error").is_displayed() and
          b.css("#deletion-confirm-panel").get_attribute("hidden") is not None,
          "the form's error summary is shown and the confirmation step is closed")
    b.shot("deletion-refused", user_in)
    check(deletions() == [], "the refused request recorded nothing")

    # Cancel in the confirmation step sends nothing and keeps what was typed.
    b.type("#deletion-user", "u1")
    b.click(f"label[for=deletion-source-{source_id}]")
    b.type("#deletion-request-id", "console-del-1")
    b.click("#deletion-review")
    check(b.visible("#deletion-confirm-panel", 5) is not None, "Review opens the confirmation again")
    b.click("#deletion-cancel")
    check(b.css("#deletion-confirm-panel").get_attribute("hidden") is not None and
          user_in.is_enabled() and user_in.get_attribute("value") == "u1" and
          b.css(f"#deletion-source-{source_id}").is_selected() and deletions() == [],
          "Cancel closes the confirmation, keeps the form, and sends nothing")

    # Confirmed: the new record is shown and is the first row of the list.
    b.click("#deletion-review")
    panel = b.visible("#deletion-confirm-panel", 5)
    text = panel.text if panel else ""
    check("u1" in text and source_id in text and "console-del-1" in text,
          f"the confirmation names the user, the source and the request id ({text!r})")
    b.shot("deletion-confirm", panel)
    b.click("#deletion-confirm")
    result = b.visible("#deletion-result", 15)
    new_id = b.css("#deletion-result [data-prop=id] dd").text if result else ""
    check(new_id.startswith("del_"), f"the new deletion request is shown ({new_id!r})")
    stored_del = deletions() or []
    record = stored_del[0] if stored_del else {}
    check(len(stored_del) == 1 and record.get("id") == new_id and record.get("userId") == "u1"
          and record.get("sourceIds") == [source_id] and record.get("state") == "COMPLETED"
          and record.get("requestId") == "console-del-1" and record.get("notifications") == "1",
          f"the collector recorded what the form said: {record}")
    shown = {p: b.css(f"#deletion-result [data-prop={p}] dd").text
             for p in ("user-id", "sources", "delete-events-sent", "purged-jobs")} if result else {}
    check(shown.get("user-id") == "u1" and shown.get("sources") == source_id and
          shown.get("delete-events-sent") == "1" and
          shown.get("purged-jobs") == str(int(record.get("purgedJobs", "0"))),
          f"the result shows the record: {shown}")
    check(user_in.get_attribute("value") == "" and
          not b.css(f"#deletion-source-{source_id}").is_selected(), "the form is cleared")
    row_sel = f"tr[data-deletion-id='{new_id}']"
    row = b.visible(row_sel, 10)
    cells = [c.text for c in b.css_all(f"{row_sel} td")] if row else []
    check(len(cells) == 7 and cells[0] == new_id and cells[1] == "u1" and source_id in cells[2]
          and cells[3] == "1" and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", cells[6]),
          f"the list shows the new request: {cells}")
    b.shot("deletion-created", result)
    line = receiver.wait_line("  delete", "userId=u1", timeout=20)
    check(line is not None and "X-Signature: verified" in line,
          f"the receiver got the delete event for u1, signature verified: {(line or '').strip()!r}")

    # 14. Audiences: the trait name shown live; a bad rule refused, the server's error next to
    # the conditions; created through the form (its first computation sends the member an
    # identify); Sync now picks up a new member; Delete asks in the row first.
    def audiences():
        status, body, _ = http("GET", f"{admin}/admin/v1/audiences", headers=auth)
        return (body or {}).get("audiences", []) if status == 200 else None

    def identify(user, message_id):
        status, body, _ = http("POST", f"http://127.0.0.1:{http_port}/v1/identify",
                               {"userId": user, "traits": {"plan": "pro"},
                                "messageId": message_id}, basic(new_key))
        return status == 200 or (status, body)

    def audience_identify(user, own_message_id):
        """The receiver's line for an identify of `user` that is not the one ingested."""
        for line in list(receiver.lines):
            if ("  identify" in line and f"userId={user} " in line + " " and
                    own_message_id not in line):
                return line
        return None

    check(identify("aud-u2", "console-aud-1") is True, "ingest accepts an identify (plan: pro)")
    check(receiver.wait_line("console-aud-1", timeout=20) is not None,
          "the receiver got that identify (its profile is stored)")
    b.go(base, "#/audiences")
    name_in = b.visible("#audience-name", 10)
    check(name_in is not None, "the audiences page shows the create form")
    empty = wait_for(lambda: b.css("#audiences-empty"), 10)
    check(empty is not None and "No audiences" in empty.text and audiences() == [],
          f"the list shows its empty state ({empty.text if empty else None!r})")
    # The trait is the collector's answer to a validate_only create (nothing is saved: the list
    # stays empty).
    b.type("#audience-name", "Über Fans – 2025!")
    trait = wait_for(lambda: (lambda t: t if t == "über_fans_2025" else None)(
        b.css("#audience-trait").text), 10)
    check(trait == "über_fans_2025",
          f"the trait name is shown as it is typed ({b.css('#audience-trait').text!r})")
    b.type("#audience-name", "Console  Power-Users!")
    trait = wait_for(lambda: (lambda t: t if t == "console_power_users" else None)(
        b.css("#audience-trait").text), 10)
    check(trait == "console_power_users",
          f"... and follows every change ({b.css('#audience-trait').text!r})")
    check(audiences() == [], "asking for the trait saved no audience")
    aud_source = wait_for(lambda: b.css(f"#audience-source-{source_id}"), 10)
    check(aud_source is not None and not aud_source.is_selected(),
          "the form offers the sources as checkboxes, none ticked")
    b.click(f"label[for=audience-source-{source_id}]")
    conditions = b.css("#audience-conditions")
    check("countGte" in (conditions.get_attribute("placeholder") or ""),
          "the conditions textarea has an example placeholder")
    b.type("#audience-conditions", '[{"trait": "plan", "op": "equals", "value": "pro"}]')
    b.click("#create-audience")
    rule_err = wait_for(lambda: (lambda e: e if e.is_displayed() and
                                 e.get_attribute("data-source") == "server" else None)(
        b.css("#audience-conditions-error")), 15)
    described = (conditions.get_attribute("aria-describedby") or "").split()
    check(bool(rule_err) and "conditions[0].op" in rule_err.text and
          "audience-conditions-error" in described and
          conditions.get_attribute("aria-invalid") == "true",
          f"a bad op is refused, the server's error next to the conditions: "
          f"{rule_err.text if rule_err else None!r}")
    check(b.css("#audience-form-error").is_displayed(), "the form's error summary is shown")
    b.shot("audience-refused", conditions)
    check(audiences() == [], "the refused audience was not created")

    # Not JSON: the form's own hint, nothing sent.
    b.type("#audience-conditions", '[{"trait": "plan",')
    b.click("#create-audience")
    hint = wait_for(lambda: (lambda e: e if e.is_displayed() and
                             e.get_attribute("data-source") == "client" else None)(
        b.css("#audience-conditions-error")), 5)
    check(bool(hint) and "JSON" in hint.text and audiences() == [],
          f"conditions that are not JSON get a hint and send nothing "
          f"({hint.text if hint else None!r})")

    b.type("#audience-conditions", '[{"trait": "plan", "op": "eq", "value": "pro"}]')
    b.click("#create-audience")
    created = b.wait_status("Created audience", 20)
    stored_aud = audiences() or []
    aud = stored_aud[0] if stored_aud else {}
    check(bool(created) and len(stored_aud) == 1 and aud.get("name") == "Console  Power-Users!"
          and aud.get("trait") == "console_power_users" and aud.get("sources") == [source_id]
          and (aud.get("rule") or {}).get("match") == "all" and
          (aud.get("lastSync") or {}).get("first") is True,
          f"the audience is created as the form said, first computation done: {aud} "
          f"({b.status_text()!r})")
    members = int(aud.get("members", "0"))
    aud_id = aud.get("id", "")
    aud_sel = f"tr[data-audience-id='{aud_id}']"
    row = b.visible(aud_sel, 10)
    cells = [c.text for c in b.css_all(f"{aud_sel} td")] if row else []
    check(len(cells) == 8 and "Console Power-Users!" in cells[0] and aud_id in cells[0]
          and "trait plan eq \"pro\"" in cells[0]
          and cells[1] == "console_power_users" and source_id in cells[2]
          and cells[3] == str(members) and "first" in cells[4]
          and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", cells[4])
          and cells[5] == str(members) and cells[6] == "0",
          f"the list shows the audience: name, id and rule, trait, source, members, last sync "
          f"(first), entered, exited: {cells}")
    check(name_in.get_attribute("value") == "" and b.css("#audience-trait").text == "—",
          "the form is cleared")
    # SPEC §6.2: the first computation reads the profiles as they are, so a user who identified
    # as pro before the audience existed is a member, and gets the audience's identify.
    line = wait_for(lambda: audience_identify("aud-u2", "console-aud-1"), 20) if members else None
    check(members == 1 and line is not None and "X-Signature: verified" in line,
          f"the user identified before the audience existed is a member at creation and gets "
          f"the audience's identify, signed (members {members}): {(line or '').strip()!r}")
    b.shot("audience-created", row)

    # Sync now: a user identified since, the row updated in place (a new last sync, not the
    # first, one entered).
    first_sync = b.css(f"{aud_sel} td.cell-last-sync time").get_attribute("datetime") if row else ""
    check(identify("aud-u3", "console-aud-2") is True, "a second user becomes pro")
    check(receiver.wait_line("console-aud-2", timeout=20) is not None,
          "the receiver got the second identify")
    b.click(f"{aud_sel} button.sync-audience")
    synced = wait_for(lambda: b.css(f"{aud_sel} td.cell-last-sync time")
                      .get_attribute("datetime") != first_sync and b.css(aud_sel), 15)
    cells = [c.text for c in b.css_all(f"{aud_sel} td")] if synced else []
    check(bool(synced) and len(cells) == 8 and cells[3] == str(members + 1)
          and "first" not in cells[4] and cells[5] == "1" and cells[6] == "0"
          and "Synced" in b.status_text(),
          f"Sync now updates the row: last sync {first_sync} → "
          f"{b.css(f'{aud_sel} td.cell-last-sync time').get_attribute('datetime')}, {cells} "
          f"({b.status_text()!r})")
    stored_aud = audiences() or [{}]
    last = stored_aud[0].get("lastSync") or {}
    check(stored_aud[0].get("members") == str(members + 1) and last.get("entered") == "1" and
          not last.get("first"), f"the collector recorded the sync: {last}")
    line = wait_for(lambda: audience_identify("aud-u3", "console-aud-2"), 20)
    check(line is not None and "X-Signature: verified" in line,
          f"the new member got the audience's identify, signed: {(line or '').strip()!r}")
    b.shot("audience-synced", b.css(aud_sel))

    # Delete: a confirmation in the row; Cancel keeps it; confirmed, it is gone.
    b.click(f"{aud_sel} button.delete-audience")
    confirm = b.visible(f"{aud_sel} .row-confirm", 5)
    check(confirm is not None and "Console" in confirm.text and
          not b.css(f"{aud_sel} button.delete-audience").is_displayed() and
          len(audiences() or []) == 1,
          f"Delete asks in the row first and sends nothing ({confirm.text if confirm else None!r})")
    b.shot("audience-confirm-delete", b.css(aud_sel))
    b.click(f"{aud_sel} button.cancel-delete-audience")
    check(b.css(f"{aud_sel} .row-confirm").get_attribute("hidden") is not None and
          b.css(f"{aud_sel} button.delete-audience").is_displayed() and
          len(audiences() or []) == 1, "Cancel closes the confirmation and keeps the audience")
    b.click(f"{aud_sel} button.delete-audience")
    b.click(f"{aud_sel} button.confirm-delete-audience")
    gone = wait_for(lambda: b.css("#audiences-empty"), 10)
    check(bool(gone) and b.wait_status("Deleted audience", 5) and audiences() == [],
          f"a confirmed delete removes the audience ({b.status_text()!r})")
    missing = b.unlabeled_controls()
    check(not missing, f"every control on #/audiences has a label ({missing})")

    # 15. A token the server stops accepting (here: a wrong one in the tab) returns to sign-in
    # with the server's message; signing in again goes back to the page.
    d.execute_script("sessionStorage.setItem('hookrelay.adminToken', 'stale-token');")
    b.go(base, "#/sources")
    err = b.visible("#login-error", 10)
    check(err is not None and "401" in err.text and d.execute_script("return location.hash")
          == "#/login", f"a 401 mid-session returns to sign-in with the server's message "
                        f"({err.text if err else None!r})")
    b.type("#token", token)
    b.click("#sign-in")
    check(bool(wait_for(lambda: d.execute_script("return location.hash") == "#/sources" and
                        b.css(src_sel), 10)), "signing in again returns to the sources page")

    # 16. Sign out.
    b.click("#sign-out")
    check(b.visible("#token", 10) is not None and
          d.execute_script("return sessionStorage.getItem('hookrelay.adminToken')") is None,
          "Sign out returns to the sign-in form and forgets the token")
    b.shot("signed-out")


def run_tokenless(b, base, admin):
    """A collector without an admin token, reached on loopback: the console goes straight in."""
    d = b.driver
    status, _, _ = http("GET", admin + "/admin/v1/catalog")
    check(status == 200, f"without a token configured the API answers on loopback ({status})")
    b.go(base, "")
    check(b.visible("label[for=type-webhooks]", 15) is not None,
          "without a token the console opens straight on the setup page")
    check(not b.css_all("#token"), "no sign-in form is shown")
    state = d.execute_script(
        "return [sessionStorage.getItem('hookrelay.adminToken'), location.hash, "
        "document.getElementById('nav').hidden, document.getElementById('sign-out').hidden]")
    check(state == ["", "#/setup", False, True],
          f"signed in with no token: navigation shown, no Sign out ({state})")
    b.shot("tokenless-setup")
    # A link to a page, opened in a new session (a fresh load), lands on that page.
    d.execute_script("sessionStorage.clear()")
    d.get("about:blank")
    b.go(base, "#/sources")

    def sources_heading():
        heading = b.css_all("h1.page-title")
        return heading[0].text if heading and heading[0].text == "Sources" else None
    heading = wait_for(sources_heading, 15)
    check(heading == "Sources" and not b.css_all("#token") and
          d.execute_script("return location.hash") == "#/sources",
          f"a link to #/sources opens Sources directly ({heading!r}, "
          f"{d.execute_script('return location.hash')})")
    b.shot("tokenless-sources")


def main():
    bin_dir = os.environ.get("HOOKRELAY_BIN_DIR")
    if not bin_dir:
        print("HOOKRELAY_BIN_DIR is not set (the bazel-bin directory with collector/collector, "
              "deliverer/deliverer and tools/receiver/demo_receiver)", file=sys.stderr)
        return 2
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            print(f"{path} is missing: apt-get install -y --no-install-recommends chromium "
                  "chromium-driver", file=sys.stderr)
            return 2
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("selenium is not installed (tests/console/run.sh installs it in a venv)",
              file=sys.stderr)
        return 2

    static_checks()

    work = tempfile.mkdtemp(prefix="hookrelay-console-")
    shots_dir = os.environ.get("TEST_OUTPUT_DIR") or os.path.join(work, "console-screenshots")
    os.makedirs(shots_dir, exist_ok=True)
    token = "console-" + secrets.token_hex(16)
    token_file = os.path.join(work, "admin-token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(token + "\n")

    processes = []
    browser = None
    try:
        receiver = Process("receiver", [os.path.join(bin_dir, "tools/receiver/demo_receiver"),
                                        "--address=127.0.0.1:0", f"--secret={SECRET}"], work)
        processes.append(receiver)
        line = receiver.wait_line("listening on", timeout=30)
        if not line:
            raise RuntimeError(f"the receiver did not start (see {receiver.log_path})")
        receiver_url = line.split("listening on ")[1].split()[0]
        if not receiver_url.endswith("/"):
            receiver_url += "/"

        collector = Process("collector", [
            os.path.join(bin_dir, "collector/collector"), f"--data_dir={work}/data",
            "--grpc_address=127.0.0.1:0", "--http_address=127.0.0.1:0",
            "--metrics_address=127.0.0.1:0", "--admin_http_address=127.0.0.1:0",
            f"--admin_token_file={token_file}"], work)
        processes.append(collector)
        grpc_port = collector.field("grpc_port")
        http_port = collector.field("http_port")
        admin_port = collector.field("admin_http_port")
        admin = f"http://127.0.0.1:{admin_port}"

        # A second collector without an admin token: its API answers on loopback without one.
        open_collector = Process("collector-tokenless", [
            os.path.join(bin_dir, "collector/collector"), f"--data_dir={work}/data-tokenless",
            "--grpc_address=127.0.0.1:0", "--http_address=127.0.0.1:0",
            "--metrics_address=127.0.0.1:0", "--admin_http_address=127.0.0.1:0"], work)
        processes.append(open_collector)
        open_admin = f"http://127.0.0.1:{open_collector.field('admin_http_port')}"

        deliverer = Process("deliverer", [
            os.path.join(bin_dir, "deliverer/deliverer"), f"--collector=127.0.0.1:{grpc_port}",
            "--metrics_address=127.0.0.1:0", "--allow_private_networks",
            f"--admin_token_file={token_file}"], work)
        processes.append(deliverer)

        # What the server must do for the console: serve it at / with a strict CSP, and the API.
        status, page, headers = http("GET", admin + "/")
        lower = {k.lower(): v for k, v in headers.items()}
        check(status == 200 and isinstance(page, str) and "core.js" in page,
              f"GET / serves the console's index.html ({status})")
        csp = lower.get("content-security-policy", "")
        check("default-src 'self'" in csp and "frame-ancestors 'none'" in csp,
              f"the console is served with a strict Content-Security-Policy ({csp!r})")
        check(lower.get("content-type", "").startswith("text/html"),
              f"index.html is text/html ({lower.get('content-type')})")
        for name, ctype in (("core.js", "javascript"), ("main.js", "javascript"), ("style.css", "text/css")):
            status, _, headers = http("GET", f"{admin}/{name}")
            got = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
            check(status == 200 and ctype in got, f"GET /{name}: {status} {got}")
        status, body, _ = http("GET", admin + "/admin/v1/catalog")
        check(status == 401 and isinstance(body, dict) and "error" in body,
              f"the admin API refuses a call without the token ({status})")

        browser = Browser(work, shots_dir)
        try:
            run_flow(browser, admin + "/", admin, http_port, receiver, receiver_url, token)
        except Exception:  # noqa: BLE001 (reported as a failure; the rest still runs)
            traceback.print_exc()
            check(False, "the browser flow ran to its end")
            try:
                browser.shot("failure")
            except Exception:  # noqa: BLE001
                pass
        try:
            run_tokenless(browser, open_admin + "/", open_admin)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            check(False, "the tokenless flow ran to its end")
            try:
                browser.shot("tokenless-failure")
            except Exception:  # noqa: BLE001
                pass
        browser.collect_console()
        problems = [e["message"] for e in browser.console if e.get("level") == "SEVERE" and
                    "Failed to load resource" not in e.get("message", "")]
        csp_reports = [e["message"] for e in browser.console
                       if "Content Security Policy" in e.get("message", "")]
        check(not problems and not csp_reports,
              f"no script error or CSP violation in the browser console ({problems + csp_reports})")
        sizes = {os.path.basename(p): png_size(p) for p in browser.shots}
        check(len(sizes) >= 15 and all(s == (WIDTH, HEIGHT) for s in sizes.values()),
              f"{len(sizes)} screenshots of {WIDTH}x{HEIGHT}"
              + ("" if all(s == (WIDTH, HEIGHT) for s in sizes.values()) else f": {sizes}"))
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        check(False, "the test environment started")
    finally:
        if browser is not None:
            try:
                browser.driver.quit()
            except Exception:  # noqa: BLE001
                pass
        for p in reversed(processes):
            p.stop()
        for p in processes:
            check(p.proc.returncode == 0, f"{p.name} exited 0 on SIGTERM ({p.proc.returncode})")
        print(f"screenshots: {shots_dir}")
        if failures:
            print(f"logs kept in {work}", file=sys.stderr)
        elif not os.environ.get("TEST_OUTPUT_DIR"):
            # Keep the screenshots, drop the rest (store, browser profile, logs).
            for name in os.listdir(work):
                path = os.path.join(work, name)
                if name == "console-screenshots":
                    continue
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.remove(path)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"console: {len(passes)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
