"""Drive the operator console in headless Chromium (Debian's chromium + chromium-driver, through
Selenium's WebDriver client) against a running mcp-host, as the e2e test `console::` sets it up.

Usage: console_browser.py SETUP_JSON
  SETUP_JSON: {"base": "http://127.0.0.1:PORT/ui", "mcp": "http://127.0.0.1:PORT/mcp",
               "admin": SECRET, "reader": SECRET, "task": TASK_ID, "shots": DIR}

Each step asserts what the page shows; a failure exits 1 naming the step, with a screenshot of
the page as it was. Screenshots of every view go to SHOTS. Prints "ok" at the end.
"""

import json
import os
import sys
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

SETUP = json.loads(sys.argv[1])
BASE = SETUP["base"]
SHOTS = SETUP["shots"]
# Generous: a loaded 2-core machine runs a debug host and a browser.
WAIT = 60


def browser():
    options = Options()
    options.binary_location = os.environ.get("MCP_TEST_CHROMIUM", "/usr/bin/chromium")
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-extensions", "--no-first-run"]:
        options.add_argument(arg)
    service = Service(executable_path=os.environ.get("MCP_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


class Steps:
    def __init__(self, driver):
        self.d = driver
        self.wait = WebDriverWait(driver, WAIT)

    def shot(self, name):
        self.d.save_screenshot(os.path.join(SHOTS, f"{name}.png"))

    def go(self, view):
        self.d.get(f"{BASE}/#{view}")
        self.d.refresh()  # a hash change alone would not reload a view already shown

    def css(self, selector):
        return self.wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, selector)))

    def text_in(self, selector, text):
        self.wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text))
        return self.d.find_element(By.CSS_SELECTOR, selector)

    def step(self, name, run):
        try:
            run()
        except Exception as e:  # noqa: BLE001 - any failure ends the run with its page
            self.shot(f"failed-{name}")
            body = self.d.find_element(By.TAG_NAME, "body").text[:3000]
            print(f"step {name} failed: {type(e).__name__}: {e}\npage:\n{body}", file=sys.stderr)
            sys.exit(1)
        print(f"step {name}: ok", file=sys.stderr)


def mcp_call(tool, arguments, secret):
    """A 2026-07-28 tools/call straight to the MCP endpoint (what an agent does)."""
    body = {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}},
    }
    req = urllib.request.Request(SETUP["mcp"], data=json.dumps(body).encode(), headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
        "Authorization": f"Bearer {secret}"})
    with urllib.request.urlopen(req, timeout=WAIT) as resp:
        return json.load(resp)


def login(s, secret, role, shot=None):
    s.d.get(f"{BASE}/")
    s.wait.until(ec.url_contains("/login"))
    if shot:
        s.shot(shot)
    s.css("#token").send_keys(secret)
    s.d.find_element(By.ID, "submit").click()
    s.text_in("#who", role)


def wrong_secret(s):
    s.d.get(f"{BASE}/login")
    s.css("#token").send_keys("mcp_not-a-secret")
    s.d.find_element(By.ID, "submit").click()
    s.text_in("#error", "refused")


def calls_shown(d):
    """The overview's call count (the view is drawn again every 2 s: an element may go stale)."""
    try:
        return int(d.find_element(By.CSS_SELECTOR, '[data-stat="calls"] .value').text)
    except (StaleElementReferenceException, ValueError):
        return -1


def overview(s):
    # Some traffic over three of the charts' 2 s steps (a few fail: an unknown indicator).
    for _ in range(3):
        for i in range(20):
            mcp_call("echo", {"text": f"{i}"}, SETUP["admin"])
        mcp_call("current_time", {"zone": "Not/AZone"}, SETUP["admin"])
        time.sleep(2)
    s.go("overview")
    s.wait.until(lambda d: calls_shown(d) >= 63)
    s.text_in("#stats", "tools")
    s.text_in("#stats", "plugins quarantined")
    # Each upstream server's state, with its detail.
    s.css('#upstreams tr[data-upstream="py"][data-state="ready"]')
    assert s.d.find_elements(By.CSS_SELECTOR, "svg.chart polyline"), "no chart lines"
    s.shot("overview")


def sources(s):
    s.go("sources")
    s.text_in("#override-map", "echo")
    # A fixture overriding a packaged tool: the time plugin's current_time.
    packaged = s.css('tr[data-name="current_time"][data-status="overridden_by"]')
    assert "libfixture_override" in packaged.text and "mcp-time" in packaged.text, packaged.text
    quarantined = s.css('tr[data-name="segfault"][data-status="quarantined"]')
    assert "crashed" in quarantined.text, quarantined.text
    held = s.css('tr[data-name="catalog_edition"][data-status="held"]')
    assert "CATALOG-EDITION-0002" in held.text, held.text
    # A tool served under an override: the source's name and description beside it.
    renamed = s.css('tr[data-name="py_sum"][data-status="active"]')
    assert "source name: py_add" in renamed.text and "Add two integers" in renamed.text, renamed.text
    upstream = s.css('section.source.upstream')
    assert "upstream server" in upstream.text and "py_echo" in upstream.text, upstream.text
    state = s.css('section.source.upstream p.connection[data-state="ready"]')
    assert "ready" in state.text, state.text
    page = s.d.find_element(By.TAG_NAME, "body").text + s.d.page_source
    assert SETUP["secret"] not in page, "the upstream's environment value is shown"
    s.shot("sources")


def agents(s):
    s.go("agents")
    Select(s.css("#agent")).select_by_value("ops")
    s.css('#agent-tools tr[data-tool="convert_time"]')
    names = {r.get_attribute("data-tool") for r in s.d.find_elements(By.CSS_SELECTOR, "#agent-tools tr[data-tool]")}
    assert names == {"convert_time", "current_time", "echo"}, names
    s.shot("agents-ops")
    Select(s.css("#agent")).select_by_value("finder")
    s.css('#agent-tools tr[data-tool="search_tools"]')
    s.css("#search-query").send_keys("convert a time between time zones")
    s.d.find_element(By.CSS_SELECTOR, "form.search button").click()
    s.text_in("#search-results", "convert_time")
    s.shot("agents-finder-search")


def pick(s, kind, name):
    s.go("playground")
    Select(s.css("#kind")).select_by_value(kind)
    s.wait.until(lambda d: any(o.text == name for o in d.find_elements(By.CSS_SELECTOR, "#item option")))
    Select(s.d.find_element(By.ID, "item")).select_by_visible_text(name)
    s.css("#call-form")


def playground_call(s):
    pick(s, "tools", "convert_time")
    s.css("#f-arguments_time").send_keys("2026-11-29T14:00:00+01:00")
    s.d.find_element(By.CSS_SELECTOR, '[data-add="arguments.to_zones"]').click()
    s.css("#f-arguments_to_zones_0").send_keys("Asia/Tokyo")
    s.d.find_element(By.ID, "send").click()
    structured = s.text_in("#structured", "Asia/Tokyo")
    assert '"2026-11-29T22:00:00+09:00"' in structured.text, structured.text
    assert "isError: false" in s.d.find_element(By.ID, "result").text
    s.shot("playground-call")


def playground_nested_object(s):
    """A schema with a nested object behind a `$ref` and an enum: every field a form field."""
    pick(s, "tools", "json_schema_2020_12_tool")
    s.css("#f-arguments_name").send_keys("Ada")
    s.css("#f-arguments_address_city").send_keys("London")
    s.css("#f-arguments_address_street").send_keys("12 St James's Square")
    Select(s.css("#f-arguments_contactMethod")).select_by_visible_text('"email"')
    s.css("#f-arguments_email").send_keys("ada@example.org")
    s.d.find_element(By.ID, "send").click()
    result = s.text_in("#result", "London")
    assert "12 St James's Square" in result.text and "ada@example.org" in result.text, result.text
    s.shot("playground-nested")


def playground_schema_error(s):
    pick(s, "tools", "json_format")
    s.css("#f-arguments_json").send_keys('{"a": 1}')
    indent = s.d.find_element(By.ID, "f-arguments_indent")
    indent.clear()
    indent.send_keys("20")
    s.d.find_element(By.ID, "send").click()
    # 2026-07-28 answers a schema violation as an isError result naming the rule.
    s.text_in("#result", "argument `indent`: 20 is greater than the maximum of 8")
    assert "isError: true" in s.d.find_element(By.ID, "result").text
    s.shot("playground-schema-error")


def playground_input(s):
    pick(s, "tools", "confirm_delete")
    s.css("#f-arguments_filename").send_keys("a.txt")
    s.d.find_element(By.ID, "send").click()
    s.text_in("#questions", "Delete a.txt?")
    s.shot("playground-input-required")
    Select(s.css('#questions select')).select_by_value("true")
    s.d.find_element(By.ID, "answer").click()
    s.text_in("#result", "Deleted a.txt")


def trust(s):
    s.go("trust")
    drift = s.css('.drift[data-name="catalog_edition"]')
    assert "CATALOG-EDITION-0001" in drift.text and "CATALOG-EDITION-0002" in drift.text, drift.text
    s.text_in("#quarantined", "fixture-crash")
    s.shot("trust")
    drift.find_element(By.CSS_SELECTOR, "button.action").click()
    s.text_in("#drifts", "Everything served is as pinned.")
    s.shot("trust-accepted")


def tasks(s):
    s.go("tasks")
    row = s.css(f'tr[data-task="{SETUP["task"]}"]')
    assert "working" in row.text, row.text
    s.shot("tasks")
    row.find_element(By.TAG_NAME, "button").click()
    s.text_in(f'tr[data-task="{SETUP["task"]}"]', "cancelled")


def live_calls(s):
    s.go("calls")
    s.text_in("#live-state", "Watching")
    answer = mcp_call("echo", {"text": "seen live"}, SETUP["admin"])
    assert "override: seen live" in json.dumps(answer), answer
    row = s.css('#live tr[data-tool="echo"]')
    assert "alice" in row.text and "ok" in row.text, row.text
    assert "seen live" not in s.d.find_element(By.ID, "live").text, "an argument value was shown"
    s.shot("live-calls")


def click_in(s, row, button):
    """Click `button` in `row` (the view is drawn again every 2 s: an element may go stale)."""
    for _ in range(100):
        try:
            s.css(row).find_element(By.CSS_SELECTOR, button).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.1)
    raise AssertionError(f"{button} in {row} stayed stale")


def approvals(s):
    """bob's unattended agent calls an upstream tool a rule holds for an admin (approver:
    console): alice approves one call, then refuses the next."""
    for approve, expect in ((True, "needs a yes"), (False, "alice refused it in the console")):
        box = {}
        call = threading.Thread(target=lambda: box.update(
            answer=mcp_call("py_echo", {"text": "needs a yes"}, SETUP["reader"])))
        call.start()
        s.go("approvals")
        row = s.text_in("#approvals tr[data-approval]", "needs a yes")
        assert "py_echo" in row.text and "bob" in row.text, row.text
        if approve:
            s.shot("approvals")
        click_in(s, "#approvals tr[data-approval]", "button.approve" if approve else "button.refuse")
        call.join(WAIT)
        assert expect in json.dumps(box.get("answer")), box
    s.text_in("#view", "No call is waiting for approval.")


def read_only(s):
    """bob is no admin: the actions are not offered; then he logs out."""
    login(s, SETUP["reader"], "bob (read-only)")
    s.go("trust")
    s.text_in("#drifts", "(admins only)")
    s.text_in("#quarantined", "(admins only)")
    assert not s.d.find_elements(By.CSS_SELECTOR, "button.action")
    s.go("playground")
    assert not s.d.find_elements(By.ID, "who-user"), "bob may not call as others"
    s.shot("trust-read-only")
    s.d.find_element(By.ID, "logout").click()
    s.wait.until(ec.url_contains("/login"))


def playground_as_user(s):
    """An admin calls as another configured user, through an agent."""
    pick(s, "tools", "whoami")
    Select(s.css("#who-user")).select_by_value("bob")
    s.css("#send").click()  # the list is read again as bob sees it, the form drawn again
    result = s.text_in("#result", "bob")
    assert "alice" not in result.text, result.text


def playground_resource_and_prompt(s):
    pick(s, "resources", "greeting")
    s.d.find_element(By.ID, "send").click()
    s.text_in("#result", "hello from override")
    pick(s, "prompts", "greet")
    s.css("#f-arguments_name").send_keys("Ada")
    s.d.find_element(By.ID, "send").click()
    s.text_in("#result", "override greets Ada")
    s.shot("playground-prompt")


def retry_quarantined(s):
    s.go("trust")
    s.css('#quarantined button.action').click()
    s.text_in("#quarantined", "No plugin is quarantined.")


def main():
    os.makedirs(SHOTS, exist_ok=True)
    driver = browser()
    try:
        s = Steps(driver)
        steps = [
            ("wrong-secret", wrong_secret),
            ("read-only", read_only),
            ("login", lambda s: login(s, SETUP["admin"], "alice (admin)", "login")),
            ("overview", overview),
            ("sources", sources),
            ("agents", agents),
            ("playground-call", playground_call),
            ("playground-nested-object", playground_nested_object),
            ("playground-schema-error", playground_schema_error),
            ("playground-input", playground_input),
            ("playground-as-user", playground_as_user),
            ("playground-resource-and-prompt", playground_resource_and_prompt),
            ("live-calls", live_calls),
            ("approvals", approvals),
            ("tasks", tasks),
            ("trust", trust),
            ("retry-quarantined", retry_quarantined),
        ]
        for name, run in steps:
            s.step(name, lambda run=run: run(s))
    except TimeoutException as e:
        print(f"timed out: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        driver.quit()
    print("ok")


if __name__ == "__main__":
    main()
