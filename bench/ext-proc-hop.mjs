/**
 * The loopback cost of an endpoint-picker (ext_proc-shaped) exchange in Node, for the decision in
 * docs/kubernetes.md ("Plan: sluice as the extension's endpoint picker"): one bidirectional gRPC
 * stream per request, two messages each way (the request headers, then a body of BODY bytes), raw
 * bytes without protobuf (a floor: the real protocol adds protobuf encoding). Client and server
 * share this process, so the CPU per request covers both ends of the hop.
 *
 * @grpc/grpc-js is not a sluice dependency; run it from a scratch directory:
 *   mkdir /tmp/hop && cd /tmp/hop && npm init -y && npm install @grpc/grpc-js@1
 *   cp <repo>/bench/ext-proc-hop.mjs . && BODY=2048 node ext-proc-hop.mjs
 */

import { performance } from "node:perf_hooks";
import grpc from "@grpc/grpc-js";

const BODY = Number(process.env.BODY ?? 2048);
const N = Number(process.env.N ?? 20000);
const CONC = Number(process.env.CONC ?? 50);
const id = (b) => b;
const service = {
  process: {
    path: "/x.P/Process",
    requestStream: true,
    responseStream: true,
    requestSerialize: id,
    requestDeserialize: id,
    responseSerialize: id,
    responseDeserialize: id,
  },
};
const server = new grpc.Server();
server.addService(service, {
  process(call) {
    call.on("data", (m) => call.write(m.length > 64 ? Buffer.from("ok") : m));
    call.on("end", () => call.end());
  },
});
const port = await new Promise((r, j) =>
  server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? j(e) : r(p))),
);
const Client = grpc.makeGenericClientConstructor(service);
const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
const headers = Buffer.alloc(300, 1),
  body = Buffer.alloc(BODY, 2);
function one() {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const call = client.process();
    let got = 0;
    call.on("data", () => {
      got++;
      if (got === 1) call.write(body);
      if (got === 2) {
        call.end();
      }
    });
    call.on("end", () => resolve(performance.now() - t0));
    call.on("error", reject);
    call.write(headers);
  });
}
for (let i = 0; i < 2000; i++) await one();
const lat = [];
const cpu0 = process.cpuUsage();
const t0 = performance.now();
let next = 0;
await Promise.all(
  Array.from({ length: CONC }, async () => {
    while (next++ < N) lat.push(await one());
  }),
);
const wall = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
lat.sort((a, b) => a - b);
const q = (p) => lat[Math.min(lat.length - 1, Math.ceil(p * lat.length) - 1)].toFixed(3);
const seq = [];
for (let i = 0; i < 3000; i++) seq.push(await one());
seq.sort((a, b) => a - b);
console.log(
  JSON.stringify({
    body: BODY,
    requests: lat.length,
    conc: CONC,
    per_s: Math.round((lat.length / wall) * 1000),
    cpu_us_per_request_both_sides: Math.round((cpu.user + cpu.system) / lat.length),
    p50_ms: q(0.5),
    p99_ms: q(0.99),
    unloaded_p50_ms: seq[1500].toFixed(3),
    unloaded_p99_ms: seq[2970].toFixed(3),
  }),
);
client.close();
server.forceShutdown();
