/**
 * The admin and pricing settings of the command line: `--admin-port` (off by default), `--admin-host`
 * (127.0.0.1), the token from `--admin-token-file` or `SLUICE_ADMIN_TOKEN`, the same keys in `--config`,
 * and `pricing` in `--config`.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { parseGatewayArgs } from "../../src/cli/flags.js";

const WORKER = ["--worker-urls", "http://127.0.0.1:8000"];

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "sluice-tenancy-cli-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs `fn` with SLUICE_ADMIN_TOKEN set to `value` (undefined = unset), restoring it afterwards. */
function withEnvToken<T>(value: string | undefined, fn: () => T): T {
  const saved = process.env.SLUICE_ADMIN_TOKEN;
  if (value === undefined) delete process.env.SLUICE_ADMIN_TOKEN;
  else process.env.SLUICE_ADMIN_TOKEN = value;
  try {
    return fn();
  } finally {
    if (saved === undefined) delete process.env.SLUICE_ADMIN_TOKEN;
    else process.env.SLUICE_ADMIN_TOKEN = saved;
  }
}

describe("admin flags", () => {
  test("no --admin-port: no admin API", () => {
    withEnvToken("env-token", () => assert.equal(parseGatewayArgs(WORKER).admin, undefined));
  });

  test("--admin-port with --admin-token-file (trimmed), on 127.0.0.1 unless --admin-host says otherwise", async (t) => {
    const dir = await tempDir(t);
    const tokenFile = join(dir, "admin.token");
    await writeFile(tokenFile, "  file-token-123\n");
    withEnvToken("env-token", () => {
      const flags = parseGatewayArgs([...WORKER, "--admin-port", "9180", "--admin-token-file", tokenFile]);
      // The file wins over the environment.
      assert.deepEqual(flags.admin, { host: "127.0.0.1", port: 9180, token: "file-token-123" });
      const wide = parseGatewayArgs([
        ...WORKER,
        "--admin-port",
        "0",
        "--admin-host",
        "0.0.0.0",
        "--admin-token-file",
        tokenFile,
      ]);
      assert.deepEqual(wide.admin, { host: "0.0.0.0", port: 0, token: "file-token-123" });
    });
  });

  test("SLUICE_ADMIN_TOKEN when no token file is given; neither is a startup error naming the flag", () => {
    withEnvToken("env-token", () => {
      assert.deepEqual(parseGatewayArgs([...WORKER, "--admin-port", "9180"]).admin, {
        host: "127.0.0.1",
        port: 9180,
        token: "env-token",
      });
    });
    for (const missing of [undefined, "   "]) {
      withEnvToken(missing, () => {
        assert.throws(
          () => parseGatewayArgs([...WORKER, "--admin-port", "9180"]),
          (err: unknown) => err instanceof ConfigError && /--admin-token-file/.test(err.message),
        );
      });
    }
  });

  test("a bad --admin-port or an unreadable token file is refused", async (t) => {
    const dir = await tempDir(t);
    withEnvToken("env-token", () => {
      for (const port of ["-1", "abc", "1.5"]) {
        assert.throws(() => parseGatewayArgs([...WORKER, "--admin-port", port]), /admin-port/);
      }
      assert.throws(
        () => parseGatewayArgs([...WORKER, "--admin-port", "9180", "--admin-token-file", join(dir, "nope")]),
        (err: unknown) => err instanceof ConfigError && /ENOENT/.test(err.message),
      );
    });
  });

  test("admin_port, admin_host, admin_token_file and pricing in --config", async (t) => {
    const dir = await tempDir(t);
    const tokenFile = join(dir, "admin.token");
    await writeFile(tokenFile, "file-token-456");
    const config = join(dir, "gateway.yaml");
    await writeFile(
      config,
      [
        "worker_urls: [http://127.0.0.1:8000]",
        "admin_port: 9181",
        "admin_host: 127.0.0.2",
        `admin_token_file: ${tokenFile}`,
        "pricing:",
        "  mock-llm: {input_per_mtok: 0.1, output_per_mtok: 0.3}",
      ].join("\n"),
    );
    withEnvToken(undefined, () => {
      const flags = parseGatewayArgs(["--config", config]);
      assert.deepEqual(flags.admin, { host: "127.0.0.2", port: 9181, token: "file-token-456" });
      assert.deepEqual(flags.pricing, { "mock-llm": { input_per_mtok: 0.1, output_per_mtok: 0.3 } });
      // The command line wins over the file.
      assert.equal(parseGatewayArgs(["--config", config, "--admin-port", "9999"]).admin?.port, 9999);
    });

    await writeFile(
      config,
      "worker_urls: [http://127.0.0.1:8000]\npricing:\n  m: {input_per_mtok: -1, output_per_mtok: 0}\n",
    );
    assert.throws(
      () => parseGatewayArgs(["--config", config]),
      (err: unknown) => err instanceof ConfigError && /pricing\.m\.input_per_mtok/.test(err.message),
    );
  });
});
