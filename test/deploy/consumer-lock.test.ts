/** consumerLock: the lock that installs a packed tarball at the versions of the repository's lock. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { consumerLock, type PackageLock } from "./consumer-lock.js";

const REPO_LOCK: PackageLock = {
  name: "sluice",
  version: "0.1.0",
  lockfileVersion: 3,
  requires: true,
  packages: {
    "": { name: "sluice", version: "0.1.0", dependencies: { "@sluice/scheduler": "0.1.0", yaml: "^2.9.1" } },
    "node_modules/@sluice/scheduler": { resolved: "packages/scheduler", link: true },
    "node_modules/yaml": { version: "2.9.1", resolved: "https://registry.example/yaml-2.9.1.tgz" },
    "node_modules/typescript": { version: "5.9.3", dev: true },
    "node_modules/typescript/node_modules/x": { version: "1.0.0", dev: true },
    "packages/scheduler": { name: "@sluice/scheduler", version: "0.1.0", license: "Apache-2.0" },
  },
};

const PACKED = {
  name: "sluice",
  version: "0.1.0",
  license: "Apache-2.0",
  bin: { sluice: "bin/sluice.js" },
  dependencies: { "@sluice/scheduler": "0.1.0", yaml: "^2.9.1" },
  bundleDependencies: ["@sluice/scheduler"],
};

test("the consumer lock pins the packed package, its bundle and the production entries only", () => {
  const lock = consumerLock(REPO_LOCK, PACKED, "/tmp/sluice-0.1.0.tgz", "check");
  assert.deepEqual(Object.keys(lock.packages).sort(), [
    "",
    "node_modules/sluice",
    "node_modules/sluice/node_modules/@sluice/scheduler",
    "node_modules/yaml",
  ]);
  assert.deepEqual(lock.packages[""], {
    name: "check",
    dependencies: { sluice: "file:/tmp/sluice-0.1.0.tgz" },
  });
  assert.equal(lock.packages["node_modules/sluice"]!.resolved, "file:/tmp/sluice-0.1.0.tgz");
  assert.deepEqual(lock.packages["node_modules/sluice"]!.bundleDependencies, ["@sluice/scheduler"]);
  assert.equal(lock.packages["node_modules/sluice/node_modules/@sluice/scheduler"]!.inBundle, true);
  assert.equal(lock.packages["node_modules/yaml"], REPO_LOCK.packages["node_modules/yaml"]);
});

test("a bundled package that is not a workspace of the repository is named", () => {
  assert.throws(
    () => consumerLock(REPO_LOCK, { ...PACKED, bundleDependencies: ["@sluice/other"] }, "x.tgz", "check"),
    /no workspace package named @sluice\/other/,
  );
});
