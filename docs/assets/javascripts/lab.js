// The lab (docs/lab.md): two workers, one queue file, one model clock, the fence.
//
// The page holds <div class="qc-lab">; this script builds the controls in it
// and drives docs_support/lab_engine.py and lab_story.py (published in assets/lab/)
// in Pyodide, in a Web Worker of its own (assets/run/worker.js, the Run
// buttons' runtime: everything from this site). Each step goes to Python as
// one JSON request; Python answers with the whole state, every row and effect
// read from the database file after the step, and this script draws it: the
// workers, the rows, the effects, a timeline (SVG, drawn here) and the steps
// as text. Back replays the steps before the last one on a new file; changing
// the ACK replays the same steps with the other ACK.
//
// Python loads when the lab comes into view, or when the reader points at or
// focuses a control (window.qcRunBox.loadInView = false leaves only the
// latter, as for the Run boxes). window.qcLab.call(request) is the same entry
// the controls use; the browser test reads the database through it.
(function () {
  "use strict";
  const script = document.currentScript;
  const workerUrl = new URL("../run/worker.js", script.src);
  // the package docs_support, as the repository has it: its lab's two modules
  const modules = ["lab_engine.py", "lab_story.py"].map((name) => [name, new URL(`../lab/${name}`, script.src)]);
  const SVG = "http://www.w3.org/2000/svg";

  // ------------------------------------------------------------ Python
  let worker = null;
  let loading = null; // a promise: the engine is written into Python's files
  let chain = Promise.resolve(); // one run at a time: the worker keeps one stdout
  let nextId = 1;
  const pending = new Map();

  function runNow(code) {
    return new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { out: "", err: "", resolve, reject });
      worker.postMessage({ id, code });
    });
  }

  function run(code) {
    const result = chain.then(() => runNow(code));
    chain = result.catch(() => {});
    return result;
  }

  function python() {
    if (loading !== null) return loading;
    worker = new Worker(workerUrl, { type: "module" });
    worker.onmessage = (event) => {
      const message = event.data;
      const job = pending.get(message.id);
      if (job === undefined) return;
      if (message.kind === "stdout") job.out += message.text;
      else if (message.kind === "stderr") job.err += message.text;
      else if (message.kind === "done") {
        pending.delete(message.id);
        if (message.ok) job.resolve(job.out);
        else job.reject(new Error(job.err || "Python stopped"));
      }
    };
    loading = Promise.all(modules.map(async ([name, url]) => {
      const response = await fetch(url);
      if (!response.ok) throw new Error(`${name}: HTTP ${response.status}`);
      return [name, await response.text()];
    })).then((sources) => run(
      "import importlib, os\n"
      + "package = '/home/pyodide/site-packages/docs_support'\n"
      + "os.makedirs(package, exist_ok=True)\n"
      + "open(package + '/__init__.py', 'w').close()\n"
      + sources.map(([name, text]) => `open(package + '/${name}', 'w').write(${JSON.stringify(text)})\n`).join("")
      + "importlib.invalidate_caches()\n"));
    loading.catch(() => {
      worker.terminate();
      worker = null;
      loading = null;
    });
    return loading;
  }

  async function call(request) {
    await python();
    const out = await run(
      `from docs_support import lab_story\nprint(lab_story.call(${JSON.stringify(JSON.stringify(request))}))\n`);
    return JSON.parse(out);
  }

  window.qcLab = { call };

  // ----------------------------------------------------------- helpers
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (name === "text") node.textContent = value;
      else if (name === "className") node.className = value;
      else node.setAttribute(name, value);
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  let uid = 0;

  function button(label, action, title) {
    const b = el("button", { type: "button", className: "md-button qc-lab__button", text: label });
    if (action) b.dataset.action = action;
    if (title) b.title = title;
    return b;
  }

  // A box that may scroll sideways on a narrow screen: reachable from the keyboard.
  function scroller(label, child) {
    return el("div", { className: "qc-lab__scroll", role: "region", tabindex: "0", "aria-label": label }, child);
  }

  function selectWith(labelText, options, className) {
    const id = `qc-lab-select-${++uid}`;
    const select = el("select", { id, className });
    for (const [value, text] of options) select.append(el("option", { value, text }));
    return [el("label", { for: id, text: labelText }), select];
  }

  const WORKER_ACTIONS = [
    ["claim", "claim"], ["pause", "pause"], ["wake", "wake"], ["complete", "complete"],
    ["fail", "fail"], ["release", "release"], ["crash", "crash between effect and ACK"],
  ];
  const SHORT = {
    claim: "claim", pause: "pause", wake: "wake", complete: "ACK", fail: "fail",
    release: "release", crash: "crash", copy: "copy", restore: "restore",
  };

  // ------------------------------------------------------------ the lab
  function setUp(root) {
    if (root.dataset.ready) return;
    root.dataset.ready = "1";
    const scenarios = JSON.parse(root.dataset.scenarios);
    const acks = JSON.parse(root.dataset.acks);
    const leaseSeconds = Number(root.dataset.leaseSeconds);
    let state = null;
    let actions = [];

    const [scenarioLabel, scenarioSelect] = selectWith("Scenario",
      [["", "Free: E0001 and E0002, your own steps"],
        ...Object.entries(scenarios).map(([key, s]) => [key, s.title])], "qc-lab__select");
    const [ackLabel, ackSelect] = selectWith("The ACK", Object.entries(acks), "qc-lab__select");
    const back = button("Back", "back", "Undo the last step (the steps before it run again)");
    const next = button("Next", "next", "The scenario's next step");
    const reset = button("Reset", "reset", "A new queue file, from the first step");
    const setup = el("div", { className: "qc-lab__setup" },
      el("div", { className: "qc-lab__field" }, scenarioLabel, scenarioSelect),
      el("div", { className: "qc-lab__field" }, ackLabel, ackSelect),
      el("div", { className: "qc-lab__nav" }, back, next, reset));
    const caption = el("p", { className: "qc-lab__caption" });
    const status = el("p", { className: "qc-lab__status", role: "status", "aria-live": "polite" });

    const memory = {};
    const groups = ["A", "B"].map((name) => {
      memory[name] = el("p", { className: "qc-lab__memory" });
      return el("fieldset", { className: "qc-lab__group" },
        el("legend", { text: `Worker ${name}` }),
        el("div", { className: "qc-lab__buttons" },
          ...WORKER_ACTIONS.map(([verb, label]) => button(label, `${name}.${verb}`))),
        memory[name]);
    });
    const clockLegend = el("legend", { text: "Clock" });
    groups.push(el("fieldset", { className: "qc-lab__group" }, clockLegend,
      el("div", { className: "qc-lab__buttons" },
        button("+1 s", "clock.1", "Move the shared model clock one second on"),
        button(`+${leaseSeconds} s`, "clock.lease", "Move the clock on by one lease"))));
    groups.push(el("fieldset", { className: "qc-lab__group" }, el("legend", { text: "Database" }),
      el("div", { className: "qc-lab__buttons" },
        button("copy", "db.copy", "Copy the file: a standby that lags from now on"),
        button("restore the copy", "db.restore", "The copy takes over: a failover that loses what came after it"))));
    const controls = el("div", { className: "qc-lab__controls" }, ...groups);

    const rowsTable = el("table", { className: "qc-lab__table qc-lab__rows" });
    const effectsTable = el("table", { className: "qc-lab__table qc-lab__effects" });
    const verdict = el("p", { className: "qc-lab__verdict" });
    const timeline = el("div", {
      className: "qc-lab__timeline", role: "region", tabindex: "0",
      "aria-label": "Timeline of both workers (it may scroll sideways; the steps below say the same in words)",
    });
    const log = el("ol", { className: "qc-lab__log" });
    root.replaceChildren(setup, caption, controls, status,
      el("p", { className: "qc-lab__heading", text: "The rows, as the database file holds them after the step" }),
      scroller("The rows (they may scroll sideways)", rowsTable),
      el("p", { className: "qc-lab__heading", text: "The effects table, as the file holds it" }),
      scroller("The effects (they may scroll sideways)", effectsTable), verdict,
      el("p", { className: "qc-lab__heading", text: "Timeline" }), timeline,
      el("p", { className: "qc-lab__heading", text: "Every step, in words" }), log);

    function scenario() {
      return scenarioSelect.value ? scenarios[scenarioSelect.value] : null;
    }

    function onScript() {
      const s = scenario();
      return s !== null && actions.every((a, i) => s.steps[i] && s.steps[i][0] === a);
    }

    // The reader's operations run one after another, each on the state the one before left.
    let line = Promise.resolve();
    function queue(operation) {
      line = line.then(operation).catch((error) => say(`The lab failed: ${error.message}`));
      return line;
    }

    async function send(request, announce) {
      root.dataset.busy = "1";
      if (state === null) say("Starting Python (a few seconds the first time)…");
      try {
        const answer = await call(request);
        if (answer.error) {
          say(answer.message);
          return false;
        }
        state = answer;
        draw();
        if (announce) say(announce(state));
        return true;
      } finally {
        delete root.dataset.busy;
        root.dataset.steps = state ? String(state.steps.length - 1) : "";
      }
    }

    function say(text) {
      status.textContent = text;
    }

    function lastSaid(s) {
      const step = s.steps[s.steps.length - 1];
      return step.number === 0 ? `A new queue file. ${step.said}` : `Step ${step.number}, at ${step.at}: ${step.said}`;
    }

    function start(announce) {
      return send({ do: "start", scenario: scenarioSelect.value || null, ack: ackSelect.value, actions },
        announce === undefined ? lastSaid : announce);
    }

    async function act(action) {
      if (state === null) await start(null);
      const why = state && state.allowed[action];
      if (why) return say(`Not now: ${why}.`);
      actions.push(action);
      if (!(await send({ do: "act", action }, lastSaid))) actions.pop();
    }

    function press(action) {
      if (action === "reset") {
        actions = [];
        return start();
      }
      if (action === "back") {
        if (actions.length === 0) return say("Nothing to undo.");
        actions.pop();
        return start();
      }
      if (action !== "next") return act(action);
      const s = scenario();
      if (s === null) return say("Choose a scenario first: Next plays its steps.");
      if (!onScript()) return say("You left the scenario's steps: Reset plays it from the start.");
      if (actions.length >= s.steps.length) return say("The scenario is over: Back, Reset, or change the ACK.");
      return act(s.steps[actions.length][0]);
    }

    root.addEventListener("click", (event) => {
      const target = event.target.closest("button[data-action]");
      if (target !== null) queue(() => press(target.dataset.action));
    });
    scenarioSelect.addEventListener("change", () => queue(() => {
      actions = [];
      return start();
    }));
    ackSelect.addEventListener("change", () => queue(() => start((s) =>
      `The same ${actions.length} steps again, with ${acks[ackSelect.value]}. ${lastSaid(s)}`)));

    function warm() {
      if (state === null) queue(() => (state === null ? start() : undefined));
    }
    root.addEventListener("pointerenter", warm, { once: true });
    root.addEventListener("focusin", warm, { once: true });
    const settings = window.qcRunBox || {};
    if (settings.loadInView !== false && "IntersectionObserver" in window) {
      const watching = new IntersectionObserver((entries) => {
        if (!entries.some((entry) => entry.isIntersecting)) return;
        watching.disconnect();
        warm();
      });
      watching.observe(root);
    }

    // --------------------------------------------------------- drawing
    function draw() {
      root.dataset.renders = String(Number(root.dataset.renders || 0) + 1); // for the browser test
      const s = scenario();
      const last = state.steps[state.steps.length - 1];
      if (s === null) caption.textContent = "Free: press any worker's buttons, move the clock, copy and restore the file.";
      else if (!onScript()) caption.textContent = `${s.title}. You left its steps: Reset plays it again.`;
      else if (actions.length < s.steps.length) {
        caption.textContent = `${s.title}. Next (${actions.length + 1} of ${s.steps.length}): ${s.steps[actions.length][1]}`;
      } else caption.textContent = `${s.title}. Done: ${s.summary}`;
      next.setAttribute("aria-disabled", String(!(s !== null && onScript() && actions.length < s.steps.length)));
      back.setAttribute("aria-disabled", String(actions.length === 0));
      for (const b of controls.querySelectorAll("button[data-action]")) {
        const why = state.allowed[b.dataset.action];
        b.setAttribute("aria-disabled", String(Boolean(why)));
        b.title = why ? `Not now: ${why}` : "";
      }
      clockLegend.textContent = `Clock: ${state.clock}`;
      for (const name of ["A", "B"]) memory[name].textContent = said(name, last.workers[name]);
      drawRows(last.rows);
      drawEffects(last.effects);
      drawVerdict(state.verdict);
      timeline.replaceChildren(drawTimeline());
      log.replaceChildren(...state.steps.slice(1).map((step) =>
        el("li", { className: `qc-lab__said qc-lab__said--${step.outcome}`, value: String(step.number) },
          el("span", { className: "qc-lab__at", text: `${step.at} ` }), step.said)));
    }

    function said(name, mind) {
      const lease = mind.lease;
      const holds = lease ? `holds ${lease.event_id}: generation ${lease.generation}, token ${lease.token}, until ${lease.lease_until}` : "holds no lease";
      if (mind.state === "crashed") return `${name} crashed: it holds nothing (its next claim starts it again).`;
      if (mind.state === "paused") return `${name} is paused and ${holds}.`;
      return `${name} ${holds}.`;
    }

    function table(node, head, rows) {
      node.replaceChildren(
        el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", { text: String(c) }))))));
    }

    function drawRows(rows) {
      table(rowsTable, ["event_id", "state", "attempts", "generation", "claim token", "lease_until", "available_at", "last_error"],
        rows.map((r) => [r.event_id, r.state, r.attempts, r.generation, r.token,
          r.lease_until ?? "NULL", r.available_at, r.last_error ?? "NULL"]));
    }

    function drawEffects(effects) {
      if (effects.length === 0) {
        effectsTable.replaceChildren(el("caption", { text: "No effect: the table is empty." }));
        return;
      }
      table(effectsTable, ["n", "event_id", "written by", "generation", "amount_cents", "at", "fence held"],
        effects.map((e) => [e.n, e.event_id, e.worker, e.generation, e.amount_cents, e.at, e.fence_held ? "yes" : "no"]));
    }

    const VERDICT = {
      once: (v) => `${v.event_id}: ${v.state}, one effect.`,
      none: (v) => `${v.event_id}: ${v.state}, no effect.`,
      doubled: (v) => `${v.event_id}: DOUBLED, ${v.effects} effects: the money counts twice.`,
      lost: (v) => `${v.event_id}: LOST, done without its effect.`,
      stale: (v) => `${v.event_id}: one effect, written by a lease queue_core's fence refuses: the worker that held the current lease was refused.`,
    };

    function drawVerdict(judged) {
      verdict.replaceChildren(...judged.map((v) =>
        el("span", { className: `qc-lab__judged qc-lab__judged--${v.kind}`, "data-kind": v.kind, text: VERDICT[v.kind](v) + " " })));
    }

    // The timeline: one column per step; a lane per worker, one for the file.
    function drawTimeline() {
      const steps = state.steps.slice(1);
      const columns = Math.max(steps.length, 4);
      const left = 76;
      const width = Math.max(timeline.clientWidth - 2, 300);
      const col = Math.max(44, Math.min(96, Math.floor((width - left - 8) / columns)));
      const full = left + col * columns + 8;
      const lane = { axis: 22, A: 62, B: 118, db: 174 };
      const height = 214;
      const x = (number) => left + (number - 0.5) * col; // the centre of step number's column
      const edge = (number) => left + (number - 1) * col; // its left edge
      const picture = svg("svg", {
        width: full, height, viewBox: `0 0 ${full} ${height}`, role: "img",
        "aria-labelledby": `qc-lab-title-${++uid}`, class: "qc-lab__svg",
      });
      picture.append(svg("title", { id: `qc-lab-title-${uid}` },
        `Timeline of ${steps.length} steps: worker A, worker B and the database file, step by step.`));
      picture.append(svg("text", { x: 4, y: lane.axis + 4, class: "qc-tl__lane" }, "clock"));
      for (const [name, y] of [["A", lane.A], ["B", lane.B], ["file", lane.db]]) {
        picture.append(svg("text", { x: 4, y: y + 4, class: "qc-tl__lane" }, name === "file" ? "effects" : `worker ${name}`));
        picture.append(svg("line", { x1: left, x2: full - 8, y1: y, y2: y, class: "qc-tl__track" }));
      }
      steps.forEach((step, i) => {
        const previous = i === 0 ? null : steps[i - 1].at;
        if (step.at !== previous) {
          picture.append(svg("text", { x: x(step.number), y: lane.axis + 4, class: "qc-tl__time", "text-anchor": "middle" }, String(step.at)));
        }
      });
      // A lease: its validity (a box up to the step that reached lease_until), the
      // holder's line inside it (until the worker let it go), and how it ended.
      for (const lease of state.leases) {
        const y = lane[lease.worker];
        const ran = steps.find((step) => step.number > lease.step && step.at >= lease.until);
        // done, released or failed ends the lease in the file at that step; a crashed or
        // refused worker's lease stays in the file until it runs out
        const ended = ["done", "released", "failed"].includes(lease.how) ? x(lease.ended_step) + 8 : null;
        const end = ended !== null && (!ran || ended < edge(ran.number)) ? ended : ran ? edge(ran.number) : full - 8;
        picture.append(svg("rect", { x: x(lease.step), y: y - 13, width: Math.max(end - x(lease.step), 2), height: 26,
          class: `qc-tl__lease qc-tl__lease--${lease.how || "open"}` }));
        picture.append(svg("text", { x: x(lease.step) + 4, y: y - 16, class: "qc-tl__small" },
          `${lease.event_id} g${lease.generation} ${lease.token}, until ${lease.until}${lease.how === "forgotten" ? " (forgotten)" : ""}`));
        if (ran && end === edge(ran.number)) {
          picture.append(svg("text", { x: end + 2, y: y + 24, class: "qc-tl__small" }, "lease ends"));
        }
      }
      // Paused: from the pause to the wake (or the right edge).
      for (const name of ["A", "B"]) {
        let from = null;
        for (const step of steps) {
          if (step.actor !== name) continue;
          if (step.action === "pause") from = step.number;
          if (step.action === "wake" && from !== null) {
            picture.append(svg("line", { x1: x(from), x2: x(step.number), y1: lane[name], y2: lane[name], class: "qc-tl__paused" }));
            from = null;
          }
        }
        if (from !== null) picture.append(svg("line", { x1: x(from), x2: full - 8, y1: lane[name], y2: lane[name], class: "qc-tl__paused" }));
      }
      // Each worker's step, and the database's copy and restore, as marks with a word.
      for (const step of steps) {
        if (step.actor === "clock") continue;
        if (step.actor === "db") {
          picture.append(svg("line", { x1: x(step.number), x2: x(step.number), y1: lane.A - 20, y2: lane.db + 14, class: "qc-tl__db" }));
          picture.append(svg("text", { x: x(step.number), y: lane.db + 30, class: "qc-tl__word", "text-anchor": "middle" }, SHORT[step.action]));
          continue;
        }
        const y = lane[step.actor];
        const kind = step.outcome;
        picture.append(kind === "crashed"
          ? svg("path", { d: `M${x(step.number) - 6},${y - 6}l12,12m0,-12l-12,12`, class: "qc-tl__mark qc-tl__mark--crashed" })
          : svg("circle", { cx: x(step.number), cy: y, r: 5, class: `qc-tl__mark qc-tl__mark--${kind}` }));
        const word = step.action === "complete" && kind === "refused" ? "refused"
          : step.action === "claim" && kind === "nothing" ? "nothing" : SHORT[step.action];
        picture.append(svg("text", { x: x(step.number), y: y + 24, class: "qc-tl__word", "text-anchor": "middle" }, word));
      }
      // Each effect, at the step that committed it.
      const seen = new Set();
      for (const step of steps) {
        for (const effect of step.effects) {
          if (seen.has(effect.n)) continue;
          seen.add(effect.n);
          const cx = x(step.number);
          picture.append(svg("path", { d: `M${cx},${lane.db - 8}l8,8l-8,8l-8,-8z`,
            class: `qc-tl__effect${effect.fence_held ? "" : " qc-tl__effect--stale"}` }));
          picture.append(svg("text", { x: cx, y: lane.db - 12, class: "qc-tl__small", "text-anchor": "middle" },
            `${effect.event_id} by ${effect.worker}`));
        }
      }
      return picture;
    }
  }

  function setUpPage() {
    document.querySelectorAll(".qc-lab").forEach(setUp);
  }

  if (typeof document$ !== "undefined") document$.subscribe(setUpPage);
  else document.addEventListener("DOMContentLoaded", setUpPage);
})();
