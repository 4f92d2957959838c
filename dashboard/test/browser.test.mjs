// The dashboard in a real browser: headless Chromium (Debian's /usr/bin/chromium) driven by
// playwright-core, against the cluster and the two dashboards dashboard/test/run starts (one
// as a jobs_admin role, one as a read-only jobs_worker role). SQL through node-postgres sets
// the scene and checks what the clicks did.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { chromium } from "playwright-core";

const ADMIN = process.env.DASHBOARD_URL;
const READER = process.env.READER_URL;
const SHOTS = process.env.SCREENSHOT_DIR;
assert.ok(ADMIN && READER && process.env.PG_JOBS_TEST_DSN, "run through dashboard/test/run");

let browser;
let db;
let counter = 0;

before(async () => {
  // A fresh profile directory each run (playwright passes it as --user-data-dir).
  browser = await chromium.launchPersistentContext(mkdtempSync(path.join(tmpdir(), "pg-jobs-chromium-")), {
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  db = new pg.Client({ connectionString: process.env.PG_JOBS_TEST_DSN });
  await db.connect();
});

after(async () => {
  await browser?.close();
  await db?.end();
});

async function one(sql, params = []) {
  const { rows } = await db.query(sql, params);
  return rows[0] ? Object.values(rows[0])[0] : undefined;
}

async function queue(prefix, settings = "") {
  const name = `${prefix}-${process.pid}-${++counter}`;
  await db.query(`SELECT jobs_create_queue($1${settings ? ", " + settings : ""})`, [name]);
  return name;
}

/** A page whose script errors fail the test; dialogs (action confirmations) are accepted. */
async function open(url) {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(message.text());
  });
  page.on("dialog", (dialog) => dialog.accept());
  page.errors = errors;
  const response = await page.goto(url);
  return { page, response };
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(SHOTS, `dashboard-${name}.png`), fullPage: false });
}

/** A job that ended failed (one attempt, failed). */
async function failedJob(q, payload = {}) {
  const id = await one("SELECT jobs_enqueue($1, $2, max_attempts => 1)", [q, payload]);
  const { rows } = await db.query("SELECT id, lease FROM jobs_claim($1)", [q]);
  assert.equal(rows[0].id, id);
  assert.equal(await one("SELECT jobs_fail($1, $2, 'smtp timeout')", [id, rows[0].lease]), "failed");
  return Number(id);
}

test("every page loads and shows what it is about", async () => {
  const q = await queue("pages");
  const failed = await failedJob(q, { to: "ada@example.com" });
  await db.query("SELECT jobs_enqueue($1, '{\"to\": \"bob@example.com\"}', kind => 'welcome')", [q]);
  await db.query("SELECT jobs_schedule('nightly-report', '0 3 * * *', $1)", [q]);
  const { rows } = await db.query("SELECT id, lease FROM jobs_claim($1, worker => 'mailer-1')", [q]);
  await db.query("SELECT jobs_heartbeat($1, $2, progress => '{\"sent\": 3}')", [rows[0].id, rows[0].lease]);
  // A claim waiting for work, so the workers page has a waiting worker.
  const waiter = new pg.Client({ connectionString: process.env.PG_JOBS_TEST_DSN });
  await waiter.connect();
  const empty = await queue("idle");
  const waiting = waiter.query("SELECT * FROM jobs_claim($1, worker => 'mailer-2', wait => '60 seconds')", [empty]);
  try {
    for (let i = 0; !(await one("SELECT count(*)::int FROM jobs.waiting_claims() WHERE worker = 'mailer-2'")); i++) {
      assert.ok(i < 500, "the claim waits");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }

    for (const [url, heading, name] of [
      ["/", "Queues", "queues"],
      [`/queues/${q}`, `Queue ${q}`, "jobs"],
      [`/jobs/${failed}`, `Job ${failed}`, "job"],
      ["/schedules", "Schedules", "schedules"],
      ["/workers", "Workers", "workers"],
    ]) {
      const { page, response } = await open(ADMIN + url);
      assert.equal(response.status(), 200, url);
      assert.match(await page.locator("h1").innerText(), new RegExp(`^${heading}`), url);
      if (name === "workers") {
        assert.match(await page.locator('tr[data-worker="mailer-2"]').innerText(), /idle-/);
        assert.match(await page.locator('tr[data-worker="mailer-1"]').innerText(), /1/);
      }
      if (name === "schedules") assert.match(await page.locator("#schedules").innerText(), /nightly-report/);
      if (name === "job") {
        assert.match(await page.locator("#errors").innerText(), /smtp timeout/);
        assert.match(await page.locator("#timeline").innerText(), /created/);
      }
      await shot(page, name);
      assert.deepEqual(page.errors, [], `${url}: script errors`);
      await page.close();
    }
  } finally {
    await db.query("SELECT jobs_enqueue($1, '{}')", [empty]);
    await waiting;
    await waiter.end();
  }
  const { response } = await open(ADMIN + "/no-such-page");
  assert.equal(response.status(), 404);
});

test("retrying a failed job changes its state, alone or as a filtered set", async () => {
  const q = await queue("retry");
  const ids = [];
  for (let i = 0; i < 4; i++) ids.push(await failedJob(q));
  const id = ids[0];
  const { page } = await open(`${ADMIN}/jobs/${id}`);
  assert.equal(await page.locator("#job-state").innerText(), "failed");
  await Promise.all([page.waitForNavigation(), page.click('button[data-action="retry"]')]);
  assert.equal(await page.locator("#job-state").innerText(), "queued");
  assert.equal(await one("SELECT state::text FROM jobs.job WHERE id = $1", [id]), "queued");

  // The other three: the filtered set says how many before it acts.
  await page.goto(`${ADMIN}/queues/${q}?state=failed`);
  await Promise.all([page.waitForNavigation(), page.click('#bulk button[value="retry"]')]);
  assert.match(await page.locator("#bulk-count").innerText(), /Retry 3 jobs\?/);
  await shot(page, "bulk-confirm");
  await Promise.all([page.waitForNavigation(), page.click("#bulk-confirm button")]);
  assert.match(await page.locator("#bulk-done").innerText(), /^3 jobs/);
  assert.equal(await one("SELECT count(*)::int FROM jobs.job WHERE queue = $1 AND state = 'queued'", [q]), 4);
  await page.close();
});

test("cancelling a running job: its worker learns it at the next heartbeat", async () => {
  const q = await queue("cancel");
  await db.query("SELECT jobs_enqueue($1, '{}')", [q]);
  const worker = new pg.Client({ connectionString: process.env.PG_JOBS_TEST_DSN });
  await worker.connect();
  const { rows } = await worker.query("SELECT id, lease FROM jobs_claim($1, worker => 'w-cancel')", [q]);
  const { id, lease } = rows[0];
  assert.equal((await worker.query("SELECT jobs_heartbeat($1, $2) AS a", [id, lease])).rows[0].a, "running");

  const { page } = await open(`${ADMIN}/jobs/${id}`);
  assert.equal(await page.locator("#job-state").innerText(), "running");
  await Promise.all([page.waitForNavigation(), page.click('button[data-action="cancel"]')]);
  assert.equal(await page.locator("#job-state").innerText(), "cancelled");
  assert.equal((await worker.query("SELECT jobs_heartbeat($1, $2) AS a", [id, lease])).rows[0].a, "cancelled");
  assert.equal((await worker.query("SELECT jobs_complete($1, $2) AS a", [id, lease])).rows[0].a, "cancelled");
  await worker.end();
  await page.close();
});

test("pausing and resuming a queue", async () => {
  const q = await queue("pause");
  const { page } = await open(`${ADMIN}/`);
  const row = page.locator(`tr[data-queue="${q}"]`);
  await Promise.all([page.waitForNavigation(), row.locator('button[data-action="pause"]').click()]);
  assert.equal(await row.locator('[data-live="paused"]').innerText(), "paused");
  assert.equal(await one("SELECT paused FROM jobs.queue WHERE name = $1", [q]), true);
  await Promise.all([page.waitForNavigation(), row.locator('button[data-action="resume"]').click()]);
  assert.equal(await row.locator('[data-live="paused"]').innerText(), "active");
  assert.equal(await one("SELECT paused FROM jobs.queue WHERE name = $1", [q]), false);
  await page.close();
});

test("filtering and paging through 10,000 jobs", async () => {
  const q = await queue("paging");
  // 10,000 jobs: kinds a and b alternate, every tenth of a is in group g1.
  await db.query(
    `SELECT jobs_enqueue_batch($1, array_agg(jsonb_build_object('n', n) ORDER BY n), kind => k)
       FROM generate_series(1, 5000) n, (VALUES ('a'), ('b')) AS kinds(k) GROUP BY k`,
    [q],
  );
  await db.query(
    "SELECT jobs_enqueue_batch($1, array_agg('{}'::jsonb), kind => 'a', group_key => 'g1') FROM generate_series(1, 500)",
    [q],
  );
  const { page } = await open(`${ADMIN}/queues/${q}`);
  await page.fill('input[name="kind"]', "a");
  await Promise.all([page.waitForNavigation(), page.click('#filter button[type="submit"]')]);
  const seen = new Set();
  let last = Infinity;
  let pages = 0;
  for (;;) {
    const ids = await page.$$eval("#jobs tbody tr", (rows) => rows.map((r) => Number(r.dataset.job)));
    const kinds = await page.$$eval("#jobs tbody tr td:nth-child(2)", (cells) => cells.map((c) => c.textContent));
    assert.ok(kinds.every((k) => k === "a"), "only kind a");
    for (const id of ids) {
      assert.ok(id < last, "newest first, no repeats across pages");
      last = id;
      seen.add(id);
    }
    pages++;
    if ((await page.locator("#older").count()) === 0) break;
    await Promise.all([page.waitForNavigation(), page.click("#older")]);
  }
  assert.equal(seen.size, 5500);
  assert.equal(pages, 110);
  // Two filters at once, and the group filter.
  await page.goto(`${ADMIN}/queues/${q}?kind=a&group=g1&state=ready`);
  assert.equal(await page.locator("#jobs tbody tr").count(), 50);
  await page.goto(`${ADMIN}/queues/${q}?kind=b&group=g1`);
  assert.equal(await page.locator("#jobs tbody tr").count(), 0);
  await page.close();
});

test("a payload holding <script> stays text", async () => {
  const q = await queue("xss");
  const evil = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">";
  const id = await one("SELECT jobs_enqueue($1, $2, kind => $3)", [q, { html: evil }, "<b>bold</b>"]);
  for (const url of [`/jobs/${id}`, `/queues/${q}`]) {
    const { page } = await open(ADMIN + url);
    assert.equal(await page.evaluate(() => window.__pwned), undefined, url);
    assert.equal(await page.locator("img").count(), 0, `${url}: no element from the payload`);
    assert.equal(await page.locator("b").count(), 0, `${url}: the kind stays text too`);
    const text = await page.locator("main").innerText();
    assert.ok(text.includes("<script>window.__pwned = 1</script>"), `${url} shows the payload as text`);
    await page.close();
  }
});

test("a read-only role sees no buttons, and the database refuses its forged POST", async () => {
  const q = await queue("readonly");
  const id = await failedJob(q);
  for (const url of ["/", `/queues/${q}`, `/jobs/${id}`]) {
    const { page, response } = await open(READER + url);
    assert.equal(response.status(), 200, url);
    assert.equal(await page.locator("form.action, #bulk, button[data-action]").count(), 0, `${url}: no action controls`);
    assert.match(await page.locator(".who").innerText(), /read-only/);
    await page.close();
  }
  const { page } = await open(`${READER}/jobs/${id}`);
  // A forged POST from the page, with the CSRF token: the dashboard passes it on, the database
  // refuses it (jobs_retry needs jobs_admin).
  const forged = await page.evaluate(async (target) => {
    const csrf = document.querySelector('meta[name="csrf-token"]').content;
    const body = new URLSearchParams({ csrf, action: "retry", target, back: "/" });
    const response = await fetch("/action", { method: "POST", body, redirect: "manual" });
    return { status: response.status, text: await response.text() };
  }, String(id));
  assert.equal(forged.status, 403);
  assert.match(forged.text, /42501/);
  assert.match(forged.text, /may not retry jobs: that needs the privileges of jobs_admin/);
  assert.equal(await one("SELECT state::text FROM jobs.job WHERE id = $1", [id]), "failed");
  const paused = await page.evaluate(async (target) => {
    const csrf = document.querySelector('meta[name="csrf-token"]').content;
    const body = new URLSearchParams({ csrf, action: "pause", target });
    return (await fetch("/action", { method: "POST", body, redirect: "manual" })).status;
  }, q);
  assert.equal(paused, 403);
  assert.equal(await one("SELECT paused FROM jobs.queue WHERE name = $1", [q]), false);
  await page.close();
});

test("a POST without the CSRF token is refused", async () => {
  const q = await queue("csrf");
  const { page } = await open(`${ADMIN}/`);
  const statuses = await page.evaluate(async (target) => {
    const post = async (fields) =>
      (await fetch("/action", { method: "POST", body: new URLSearchParams(fields), redirect: "manual" })).status;
    return [
      await post({ action: "pause", target }),
      await post({ action: "pause", target, csrf: "0".repeat(32) }),
    ];
  }, q);
  assert.deepEqual(statuses, [403, 403]);
  assert.equal(await one("SELECT paused FROM jobs.queue WHERE name = $1", [q]), false);
  await page.close();
  // And a cross-site form post (the browser says so in Sec-Fetch-Site) is refused before its
  // form is read.
  const response = await fetch(`${ADMIN}/action`, {
    method: "POST",
    headers: { "sec-fetch-site": "cross-site", "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ action: "pause", target: q }),
  });
  assert.equal(response.status, 403);
});

test("the counts update without a reload when jobs are enqueued from SQL", async () => {
  const q = await queue("live");
  const { page } = await open(`${ADMIN}/`);
  await page.evaluate(() => {
    window.__sameDocument = true;
  });
  const ready = page.locator(`tr[data-queue="${q}"] [data-live="ready"]`);
  assert.equal(await ready.innerText(), "0");
  await db.query("SELECT jobs_enqueue_batch($1, ARRAY['{}', '{}', '{}']::jsonb[])", [q]);
  await page.waitForFunction(
    (name) => document.querySelector(`tr[data-queue="${name}"] [data-live="ready"]`).textContent === "3",
    q,
    { timeout: 10000 },
  );
  assert.equal(await page.evaluate(() => window.__sameDocument), true, "no reload");
  // The finished counts follow too.
  const { rows } = await db.query("SELECT id, lease FROM jobs_claim($1)", [q]);
  await db.query("SELECT jobs_complete($1, $2)", [rows[0].id, rows[0].lease]);
  await page.waitForFunction(
    (name) => document.querySelector(`tr[data-queue="${name}"] [data-live="succeeded"]`).textContent === "1",
    q,
    { timeout: 10000 },
  );
  assert.equal(await ready.innerText(), "2");
  assert.deepEqual(page.errors, []);
  await page.close();
});
