// Run, edit and Reset for the examples that can run in the browser (the build
// wraps each in <div class="qc-run">: overrides/hooks.py). Nothing heavy loads
// with the page: the Web Worker, and with it Pyodide, starts on the first Run
// and is kept for every later run, on this page and on pages reached by
// Material's instant navigation. Stop ends the worker; the next Run starts one.
(function () {
  "use strict";
  const script = document.currentScript;
  const workerUrl = new URL("../run/worker.js", script.src);
  const explainUrl = new URL("../../run-here/", script.src);
  let worker = null;
  let nextId = 1;
  const pending = new Map(); // run id -> { onOutput, onDone }

  function theWorker() {
    if (worker === null) {
      worker = new Worker(workerUrl, { type: "module" });
      worker.onmessage = (event) => {
        const message = event.data;
        const run = pending.get(message.id);
        if (!run) return;
        if (message.kind === "done") {
          pending.delete(message.id);
          run.onDone(message);
        } else {
          run.onOutput(message.kind, message.text);
        }
      };
    }
    return worker;
  }

  function stopAll() {
    if (worker !== null) worker.terminate();
    worker = null;
    for (const [, run] of pending) run.onDone({ ok: false, stopped: true, loadMs: 0, runMs: 0 });
    pending.clear();
  }

  function button(label, title) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "md-button qc-run__button";
    b.textContent = label;
    b.title = title;
    return b;
  }

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

    const bar = document.createElement("div");
    bar.className = "qc-run__bar";
    const run = button(
      whole ? "Run the whole program" : "Run",
      whole
        ? "Run the whole program in your browser; edit it under \"The whole program\""
        : "Run this code in your browser (Python compiled to WebAssembly)",
    );
    const stop = button("Stop", "Stop the running code");
    const reset = button("Reset", "Put back the page's code");
    stop.hidden = true;
    const status = document.createElement("span");
    status.className = "qc-run__status";
    status.setAttribute("role", "status");
    const help = document.createElement("a");
    help.href = explainUrl.href;
    help.textContent = "What runs here?";
    help.className = "qc-run__help";
    bar.append(run, stop, reset, status, help);
    recorded.before(bar);

    const output = document.createElement("pre");
    output.className = "qc-run__output";
    output.hidden = true;
    output.setAttribute("role", "log"); // read out as it grows
    output.setAttribute("aria-label", "Output of your run");
    bar.after(output);

    run.addEventListener("click", () => {
      const id = nextId++;
      output.textContent = "";
      output.hidden = false;
      output.classList.remove("qc-run__output--failed");
      run.disabled = true;
      stop.hidden = false;
      status.textContent = worker === null ? "Starting Python…" : "Running…";
      const started = performance.now();
      pending.set(id, {
        onOutput(kind, text) {
          const part = document.createElement("span");
          if (kind === "stderr") part.className = "qc-run__stderr";
          part.textContent = text;
          output.append(part);
          status.textContent = "Running…";
        },
        onDone(result) {
          run.disabled = false;
          stop.hidden = true;
          const seconds = ((performance.now() - started) / 1000).toFixed(2);
          box.dataset.loadMs = String(Math.round(result.loadMs ?? 0));
          box.dataset.runMs = String(Math.round(result.runMs ?? 0));
          box.dataset.state = result.stopped ? "stopped" : result.ok ? "done" : "failed";
          if (result.stopped) status.textContent = "Stopped.";
          else if (result.ok) status.textContent = `Done in ${seconds} s.`;
          else {
            status.textContent = `Raised an exception (${seconds} s).`;
            output.classList.add("qc-run__output--failed");
          }
        },
      });
      box.dataset.state = "running";
      theWorker().postMessage({ id, code: code.textContent });
    });
    stop.addEventListener("click", stopAll);
    reset.addEventListener("click", () => {
      code.textContent = original;
      output.hidden = true;
      output.textContent = "";
      status.textContent = "";
      delete box.dataset.state;
    });
  }

  function setUpPage() {
    document.querySelectorAll(".qc-run").forEach(setUp);
  }

  if (typeof document$ !== "undefined") document$.subscribe(setUpPage);
  else document.addEventListener("DOMContentLoaded", setUpPage);
})();
