// Run, edit and Reset for the examples that can run in the browser (the build
// wraps each in <div class="qc-run">: overrides/hooks.py).
//
// One Web Worker runs Pyodide for the whole page, and is kept across pages
// reached by Material's instant navigation. Nothing of it loads with the page:
// it starts loading when a Run block scrolls into view, or when the reader
// points at or focuses a Run button, so that Python is usually ready by the
// click. Runs go to the worker one at a time; a Run pressed while another
// block runs waits, and says so. The worker cannot be interrupted (that needs
// SharedArrayBuffer, which needs cross-origin isolation headers that a static
// host does not send), so Stop ends the worker and starts a new one: it stops
// the running block only, and the runs waiting behind it start on the new one.
//
// window.qcRunBox.slowAfterMs (default 10 s) is when a run says it is taking
// long and offers Stop; the browser tests set it shorter.
// window.qcRunBox.loadInView (default true): false leaves Python unloaded until
// the reader points at, focuses or presses Run; the browser tests that check
// every page (not Python) set it, as a page embedding the site on a slow
// machine might.
(function () {
  "use strict";
  const script = document.currentScript;
  const workerUrl = new URL("../run/worker.js", script.src);
  const explainUrl = new URL("../../run-here/", script.src);
  const settings = (window.qcRunBox = window.qcRunBox || {});
  if (settings.slowAfterMs === undefined) settings.slowAfterMs = 10_000;
  if (settings.loadInView === undefined) settings.loadInView = true;
  // What Stop costs, said exactly: a new Python, which takes as long as this page's
  // Python took to start (measured; unknown until it has started once).
  let startedInMs = null;
  function stopSays() {
    const took = startedInMs === null ? "" : `, which took ${(startedInMs / 1000).toFixed(1)} s here`;
    return `Stop restarts Python for every block on this page: a new start${took}`;
  }

  let worker = null;
  let ready = false; // Python has started in this worker
  let unclaimedLoadMs = 0; // the warm-up's load time, shown by the first run after it
  let current = null; // the job the worker is running
  const queue = []; // jobs waiting for the worker
  let nextId = 1;

  function theWorker() {
    if (worker !== null) return worker;
    worker = new Worker(workerUrl, { type: "module" });
    ready = false;
    worker.onmessage = (event) => {
      const message = event.data;
      if (current === null || message.id !== current.id) return;
      const job = current;
      if (message.kind !== "done") {
        job.onOutput(message.kind, message.text);
        return;
      }
      current = null;
      let loadMs = message.loadMs ?? 0;
      if (loadMs > 0) startedInMs = loadMs;
      if (job.warm) {
        ready = message.ok;
        unclaimedLoadMs += loadMs;
      } else {
        if (message.ok || message.runMs > 0) ready = true;
        loadMs += unclaimedLoadMs;
        unclaimedLoadMs = 0;
      }
      job.onDone({ ...message, loadMs });
      next();
    };
    return worker;
  }

  // Give the worker the next job when it is free; tell the waiting ones why they wait.
  function next() {
    if (current === null && queue.length > 0) {
      current = queue.shift();
      theWorker().postMessage({ id: current.id, code: current.code });
    }
    if (current !== null && !current.warm) current.onStart();
    for (const job of queue) job.onWait(current);
  }

  // Start Python before the first Run needs it (an empty program).
  function warmUp() {
    if (ready || current !== null || queue.some((job) => job.warm)) return;
    queue.unshift({ id: nextId++, code: "", warm: true, onWait() {}, onOutput() {}, onDone() {} });
    next();
  }

  function stopCurrent() {
    if (current === null) return;
    const job = current;
    worker.terminate();
    worker = null;
    ready = false;
    current = null;
    unclaimedLoadMs = 0;
    job.onDone({ ok: false, stopped: true, loadMs: 0, runMs: 0 });
    warmUp(); // a new Python, for the runs waiting and the next Run
  }

  // A Python traceback, without the frames of Pyodide's own code that runs the
  // reader's (they come first, and say nothing about the reader's code).
  // Returns [head, number of frames cut, rest].
  const RUNTIME_FRAME = /^ {2}File "\/lib\/python[\d.]*\.zip\/_?pyodide\//;
  function trimmed(text) {
    const lines = text.split("\n");
    const start = lines.indexOf("Traceback (most recent call last):");
    if (start < 0) return [text, 0, ""];
    const kept = [];
    let cut = 0;
    let cutting = false;
    for (const line of lines.slice(start + 1)) {
      if (line.startsWith("  File ")) {
        cutting = RUNTIME_FRAME.test(line);
        if (cutting) cut += 1;
      } else if (!line.startsWith("    ")) cutting = false;
      if (!cutting) kept.push(line);
    }
    return [lines.slice(0, start + 1).join("\n") + "\n", cut, kept.join("\n")];
  }

  function button(label, title) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "md-button qc-run__button";
    b.textContent = label;
    b.title = title;
    return b;
  }

  function element(tag, className, text) {
    const e = document.createElement(tag);
    e.className = className;
    if (text) e.textContent = text;
    return e;
  }

  let labels = 0;

  function setUp(box) {
    if (box.dataset.ready) return;
    box.dataset.ready = "1";
    const blocks = box.querySelectorAll(".highlight");
    // A long program: the whole file, folded, is what runs and what is edited.
    const whole = box.querySelector("details .highlight code");
    const code = whole ?? blocks[0].querySelector("code");
    const recorded = blocks[blocks.length - 1];
    const original = code.textContent;
    code.setAttribute("contenteditable", "plaintext-only");
    code.setAttribute("spellcheck", "false");
    code.setAttribute("aria-label", "Python code: edit it, then Run");
    code.classList.add("qc-run__code");

    const bar = element("div", "qc-run__bar");
    const run = button(
      whole ? "Run the whole program" : "Run",
      whole
        ? "Run the whole program in your browser; edit it under \"The whole program\""
        : "Run this code in your browser (Python compiled to WebAssembly)",
    );
    const stop = button("Stop", stopSays());
    const reset = button("Reset", "Put back the page's code");
    const status = element("span", "qc-run__status");
    status.setAttribute("role", "status");
    const help = element("a", "qc-run__help", "What runs here?");
    help.href = explainUrl.href;
    stop.hidden = true;
    reset.hidden = true;
    bar.append(run, stop, reset, status, help);
    recorded.before(bar);

    // The reader's output, and the recorded one, each labelled once there are two.
    const yours = element("div", "qc-run__yours");
    yours.hidden = true;
    const yoursLabel = element("p", "qc-run__label", "Your run");
    yoursLabel.id = `qc-run-label-${++labels}`;
    const output = element("pre", "qc-run__output");
    output.setAttribute("role", "log"); // read out as it grows
    output.setAttribute("aria-labelledby", yoursLabel.id);
    output.tabIndex = 0; // it may scroll sideways: reachable from the keyboard
    yours.append(yoursLabel, output);
    bar.after(yours);
    const recordedLabel = element("p", "qc-run__label qc-run__label--recorded",
      "Recorded when the site was built");
    recordedLabel.hidden = true;
    recorded.before(recordedLabel);

    let job = null; // this box's job, while it waits or runs
    let slowTimer = null;

    function show() {
      yours.hidden = false;
      recordedLabel.hidden = false;
      reset.hidden = false;
    }

    function say(state, text) {
      if (box.dataset.state !== state) box.dataset.state = state;
      if (status.textContent !== text) status.textContent = text;
    }

    function finish(state, text) {
      clearInterval(slowTimer);
      job = null;
      run.disabled = false;
      stop.hidden = true;
      say(state, text);
    }

    run.addEventListener("pointerenter", warmUp);
    run.addEventListener("focus", warmUp);
    code.addEventListener("input", () => { reset.hidden = false; });

    run.addEventListener("click", () => {
      if (job !== null) return;
      output.textContent = "";
      output.classList.remove("qc-run__output--failed", "qc-run__output--done");
      yoursLabel.textContent = "Your run";
      yours.hidden = true;
      // Labelled at once: while Python starts, what sits under the status line is the
      // build's output, not this run's.
      recordedLabel.hidden = false;
      run.disabled = true;
      let started = null;
      let printed = false;
      warmUp(); // first in line when Python has not started
      job = {
        id: nextId++,
        code: code.textContent,
        onWait(running) {
          if (running === null || running.warm) {
            say("starting", "Starting Python (the first Run on a page takes a few seconds)…");
            stop.hidden = true;
          } else {
            say("waiting", "Waiting: another block on this page is running; this one starts when it ends.");
            stop.textContent = "Cancel";
            stop.title = "Take this block out of the line; it has not started";
            stop.hidden = false;
          }
        },
        onStart() {
          if (started !== null) return;
          started = performance.now();
          stop.hidden = true;
          say("running", ready ? "Running…" : "Starting Python…");
          // Checked as the run goes, so that a test can shorten the wait of a run under way.
          slowTimer = setInterval(() => {
            const slowAfter = Number(settings.slowAfterMs);
            if (box.dataset.state !== "running" || performance.now() - started < slowAfter) return;
            clearInterval(slowTimer);
            stop.textContent = "Stop";
            stop.title = stopSays();
            stop.hidden = false;
            say("slow", `Still running after ${slowAfter >= 1000 ? Math.round(slowAfter / 1000) : slowAfter / 1000} s. `
              + `${stopSays()}.`);
          }, 200);
        },
        onOutput(kind, text) {
          printed = true;
          show();
          if (kind !== "stderr") {
            output.append(text);
            return;
          }
          const [head, cut, rest] = trimmed(text);
          output.append(element("span", "qc-run__stderr", head));
          if (cut > 0) {
            output.append(element("span", "qc-run__note",
              `(${cut} frame${cut === 1 ? "" : "s"} of Pyodide, the runtime that runs your code, cut here)\n`));
          }
          if (rest) output.append(element("span", "qc-run__stderr", rest));
        },
        onDone(result) {
          const seconds = started === null ? "0.00" : ((performance.now() - started) / 1000).toFixed(2);
          box.dataset.loadMs = String(Math.round(result.loadMs ?? 0));
          box.dataset.runMs = String(Math.round(result.runMs ?? 0));
          if (!printed && !result.stopped) {
            show();
            output.append(element("span", "qc-run__note", "(printed nothing)"));
          }
          if (result.stopped) finish("stopped", `Stopped after ${seconds} s; Python restarts for this page.`);
          else if (result.ok) {
            output.classList.add("qc-run__output--done");
            yoursLabel.textContent = "Your run: done";
            finish("done", `Done in ${seconds} s.`);
          } else {
            output.classList.add("qc-run__output--failed");
            yoursLabel.textContent = "Your run: it raised an exception";
            if (/\bqueue-core [a-z]/.test(output.textContent)) {
              const note = element("span", "qc-run__note",
                "\n(The error names a queue-core command: that runs in a shell on your machine, "
                + "not in this browser. From Python, the store has the same operation: ");
              const api = element("a", "", "the Python API");
              api.href = new URL("../../reference/api/", script.src).href;
              note.append(api, ".)\n");
              output.append(note);
            }
            finish("failed", `Raised an exception (${seconds} s).`);
          }
        },
      };
      queue.push(job);
      next();
    });

    stop.addEventListener("click", () => {
      if (job === null) return;
      if (current === job) {
        stopCurrent();
        return;
      }
      const at = queue.indexOf(job);
      if (at >= 0) queue.splice(at, 1);
      recordedLabel.hidden = true;  // nothing ran: only the recorded output, as before
      finish("cancelled", "Cancelled before it started.");
    });

    reset.addEventListener("click", () => {
      code.textContent = original;
      if (job !== null) return; // a run goes on: its output stays
      yours.hidden = true;
      recordedLabel.hidden = true;
      reset.hidden = true;
      output.textContent = "";
      status.textContent = "";
      delete box.dataset.state;
    });
  }

  let watching = null;

  function setUpPage() {
    const boxes = document.querySelectorAll(".qc-run");
    boxes.forEach(setUp);
    if (watching !== null) watching.disconnect();
    watching = null;
    if (ready || boxes.length === 0 || !settings.loadInView || !("IntersectionObserver" in window)) return;
    // Python starts loading when the first Run block comes into view.
    watching = new IntersectionObserver((entries) => {
      if (!entries.some((entry) => entry.isIntersecting)) return;
      watching.disconnect();
      watching = null;
      warmUp();
    });
    boxes.forEach((box) => watching.observe(box.querySelector(".qc-run__bar")));
  }

  if (typeof document$ !== "undefined") document$.subscribe(setUpPage);
  else document.addEventListener("DOMContentLoaded", setUpPage);
})();
