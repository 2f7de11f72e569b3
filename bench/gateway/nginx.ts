/** nginx as the C reference proxy: found on PATH (or NGINX_BIN), run from a temp prefix with its own config. */
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { type Child, spawnChild } from "./children.js";

export interface Nginx {
  bin: string;
  version: string;
}

/** The nginx binary and its version, or undefined when there is none. */
export function findNginx(): Nginx | undefined {
  const candidates = process.env.NGINX_BIN
    ? [process.env.NGINX_BIN]
    : [...(process.env.PATH ?? "").split(delimiter), "/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"]
        .filter((dir) => dir !== "")
        .map((dir) => join(dir, "nginx"));
  for (const bin of candidates) {
    const probe = spawnSync(bin, ["-v"], { encoding: "utf8" });
    if (probe.error !== undefined || probe.status !== 0) continue;
    const version = /nginx\/(\S+)/.exec(`${probe.stderr}${probe.stdout}`)?.[1] ?? "unknown";
    return { bin, version };
  }
  return undefined;
}

/**
 * One worker process, upstream keepalive 64, HTTP/1.1 to the upstream with the Connection header
 * cleared (so upstream connections are reused), no access log. Two listeners on the same upstream:
 * `port` with nginx's defaults (response buffering on), for the non-streaming runs, and `streamPort`
 * with `proxy_buffering off`, as server-sent events are proxied, for the streaming runs.
 */
export function nginxConfig(prefix: string, port: number, streamPort: number, upstream: URL): string {
  const asRoot = process.getuid?.() === 0;
  return `${asRoot ? "user root;\n" : ""}worker_processes 1;
daemon off;
pid ${join(prefix, "nginx.pid")};
error_log ${join(prefix, "error.log")} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${join(prefix, "client_body")};
  proxy_temp_path ${join(prefix, "proxy")};
  fastcgi_temp_path ${join(prefix, "fastcgi")};
  uwsgi_temp_path ${join(prefix, "uwsgi")};
  scgi_temp_path ${join(prefix, "scgi")};
  keepalive_requests 1000000;
  upstream sluice_bench_upstream {
    server ${upstream.host};
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://sluice_bench_upstream;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
  server {
    listen 127.0.0.1:${streamPort};
    location / {
      proxy_pass http://sluice_bench_upstream;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}

export function startNginx(
  nginx: Nginx,
  dir: string,
  port: number,
  streamPort: number,
  upstream: URL,
): Child {
  const prefix = join(dir, "nginx");
  mkdirSync(prefix, { recursive: true });
  const conf = join(prefix, "nginx.conf");
  writeFileSync(conf, nginxConfig(prefix, port, streamPort, upstream));
  return spawnChild("nginx", nginx.bin, ["-p", prefix, "-c", conf, "-e", join(prefix, "error.log")]);
}
