/**
 * A lock file for a project that installs the packed `sluice` tarball, pinned to the versions the
 * repository's own package-lock.json holds. An offline `npm install ./sluice-X.tgz` cannot resolve
 * the package's version ranges (that needs the registry's package documents, which `npm ci` never
 * fetches into the cache); `npm ci` on this lock needs only the tarballs the cache already holds.
 */

interface LockEntry {
  version?: string;
  resolved?: string;
  link?: boolean;
  dev?: boolean;
  license?: string;
  engines?: Record<string, string>;
  [key: string]: unknown;
}

export interface PackageLock {
  name: string;
  version?: string;
  lockfileVersion: number;
  requires?: boolean;
  packages: Record<string, LockEntry>;
}

export interface PackedManifest {
  name: string;
  version: string;
  license?: string;
  engines?: Record<string, string>;
  bin?: Record<string, string>;
  dependencies?: Record<string, string>;
  bundleDependencies?: string[];
}

/** The lock entry of a workspace package by its name ("packages/scheduler" for @sluice/scheduler). */
function workspaceEntry(lock: PackageLock, name: string): LockEntry {
  const found = Object.entries(lock.packages).find(
    ([path, e]) => !path.startsWith("node_modules/") && e.name === name,
  );
  if (found === undefined) throw new Error(`the lock file has no workspace package named ${name}`);
  return found[1];
}

/**
 * The consumer project `consumerName` depending on `file:<tarball>` (the packed `packed`): the
 * package itself, its bundled workspace packages inside it, and every production entry of the
 * repository's lock (dev-only entries and workspace links left out).
 */
export function consumerLock(
  repoLock: PackageLock,
  packed: PackedManifest,
  tarball: string,
  consumerName: string,
): PackageLock {
  const bundled = packed.bundleDependencies ?? [];
  const self = `node_modules/${packed.name}`;
  const packages: Record<string, LockEntry> = {
    "": { name: consumerName, dependencies: { [packed.name]: `file:${tarball}` } },
    [self]: {
      version: packed.version,
      resolved: `file:${tarball}`,
      ...(bundled.length > 0 ? { bundleDependencies: bundled } : {}),
      ...(packed.license ? { license: packed.license } : {}),
      ...(packed.dependencies ? { dependencies: packed.dependencies } : {}),
      ...(packed.bin ? { bin: packed.bin } : {}),
      ...(packed.engines ? { engines: packed.engines } : {}),
    },
  };
  for (const name of bundled) {
    const { version, license, engines } = workspaceEntry(repoLock, name);
    packages[`${self}/node_modules/${name}`] = { version, inBundle: true, license, engines };
  }
  for (const [path, entry] of Object.entries(repoLock.packages)) {
    if (!path.startsWith("node_modules/") || entry.link === true || entry.dev === true) continue;
    packages[path] = entry;
  }
  return { name: consumerName, lockfileVersion: 3, requires: true, packages };
}
