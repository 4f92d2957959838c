// pg_jobs dashboard: live counts on the queues page (server-sent events from /events), and a
// confirmation before an action. Values are written with textContent: never as HTML.
"use strict";

function formatAge(seconds) {
  if (seconds < 1) return "now";
  if (seconds < 120) return Math.round(seconds) + " s";
  if (seconds < 7200) return Math.round(seconds / 60) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

function setText(row, field, text) {
  const cell = row.querySelector('[data-live="' + field + '"]');
  if (!cell) return;
  const target = cell.querySelector("a") || cell;
  if (target.textContent !== String(text)) {
    target.textContent = String(text);
    cell.classList.add("changed");
    setTimeout(() => cell.classList.remove("changed"), 800);
  }
}

function follow() {
  const table = document.getElementById("queues");
  if (!table || !window.EventSource) return;
  const source = new EventSource("/events");
  source.addEventListener("counts", (event) => {
    const snapshot = JSON.parse(event.data);
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
    for (const q of snapshot.queues || []) {
      const row = Array.from(table.querySelectorAll("tr[data-queue]")).find((r) => r.dataset.queue === q.queue);
      if (!row) continue;
      const more = q.capped ? "+" : "";
      setText(row, "ready", q.ready + more);
      setText(row, "scheduled", q.scheduled + more);
      setText(row, "running", q.running);
      setText(row, "oldest", formatAge(q.oldest_ready_seconds));
      const paused = row.querySelector('[data-live="paused"]');
      if (paused) paused.textContent = q.paused ? "paused" : "active";
      if (snapshot.finished) {
        const counts = snapshot.finished[q.queue] || [0, 0, 0];
        setText(row, "succeeded", counts[0]);
        setText(row, "failed", counts[1]);
        setText(row, "cancelled", counts[2]);
      }
    }
  });
}

function confirmActions() {
  for (const form of document.querySelectorAll("form.action")) {
    form.addEventListener("submit", (event) => {
      const button = form.querySelector("button");
      const target = form.querySelector('input[name="target"]').value;
      if (!window.confirm(button.textContent + " " + target + "?")) event.preventDefault();
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  follow();
  confirmActions();
});
