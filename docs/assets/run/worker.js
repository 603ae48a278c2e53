// The Run buttons' Python: Pyodide (CPython compiled to WebAssembly) in a Web
// Worker, so that a long run never freezes the page and Stop can end it.
// Loaded on the first Run only; later runs, on any page reached by instant
// navigation, reuse it. Everything comes from this site: the runtime from
// ../pyodide/ (copied by the build from site_runtime/node_modules/pyodide),
// queue_core from queue_core.zip (the package files of this same build).
import { loadPyodide } from "../pyodide/pyodide.mjs";

let ready = null;

async function start() {
  const started = performance.now();
  const pyodide = await loadPyodide({ indexURL: new URL("../pyodide/", import.meta.url).href });
  const zip = await fetch(new URL("queue_core.zip", import.meta.url));
  if (!zip.ok) throw new Error(`queue_core.zip: HTTP ${zip.status}`);
  pyodide.unpackArchive(await zip.arrayBuffer(), "zip", { extractDir: "/home/pyodide/site-packages" });
  pyodide.runPython("import sys; sys.path.insert(0, '/home/pyodide/site-packages')");
  return { pyodide, loadMs: performance.now() - started };
}

self.onmessage = async (event) => {
  const { id, code } = event.data;
  const send = (kind, text) => self.postMessage({ id, kind, text });
  let loadMs = 0;
  try {
    if (ready === null) ready = start();
    const runtime = await ready;
    loadMs = runtime.loadMs;
    runtime.loadMs = 0; // counted once, by the run that waited for it
    const { pyodide } = runtime;
    pyodide.setStdout({ batched: (text) => send("stdout", text + "\n") });
    pyodide.setStderr({ batched: (text) => send("stderr", text + "\n") });
    const started = performance.now();
    // Each block runs as a fresh program: its own globals, named __main__.
    const globals = pyodide.toPy({ __name__: "__main__" });
    try {
      await pyodide.runPythonAsync(code, { globals });
      self.postMessage({ id, kind: "done", ok: true, loadMs, runMs: performance.now() - started });
    } catch (error) {
      send("stderr", String(error.message ?? error));
      self.postMessage({ id, kind: "done", ok: false, loadMs, runMs: performance.now() - started });
    } finally {
      globals.destroy();
    }
  } catch (error) {
    ready = null;
    send("stderr", `The runtime could not start: ${error.message ?? error}\n`);
    self.postMessage({ id, kind: "done", ok: false, loadMs, runMs: 0 });
  }
};
