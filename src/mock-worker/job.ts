/**
 * One inference request inside the worker: waits for a running slot, generates through a
 * Generation, writes its answer, and gives the slot back when it finishes or its client leaves.
 * With a KV cache it holds its prompt plus the tokens generated so far; preempted, it keeps what it
 * has already written and resumes after a fresh prefill (the engine recomputes its KV).
 */

import type { ServerResponse } from "node:http";
import type { FinishedRequest } from "./engine-stats.js";
import type { InferenceRequest, ResponseFormat } from "./protocol.js";
import { type BatchEntry, type Batcher, Generation, type Timing, type TokenSink } from "./simulation.js";
import { endStream, SSE_HEADERS, writeEvent } from "./sse.js";

/**
 * How a job misbehaves on purpose (x-mock-fail):
 * - `hang`: hold a slot and never answer;
 * - `die-mid-stream`: answer `afterTokens` tokens, then destroy the socket (a worker that crashes
 *   mid-answer). A streaming answer has its headers and those tokens' events; a non-streaming one
 *   has its headers (full Content-Length) and half its body. It never completes cleanly.
 */
export type JobFault = { kind: "hang" } | { kind: "die-mid-stream"; afterTokens: number };

/** Told once a job has completed (not when it was aborted). */
type JobObserver = (request: FinishedRequest) => void;

export class Job implements BatchEntry, TokenSink {
  private generation: Generation | undefined;
  private finished = false;
  /** Output tokens generated so far; a preempted job resumes after them. */
  private generated = 0;
  private preemptions = 0;
  private readonly arrivedAt = performance.now();
  private scheduledAt: number | undefined;
  private firstTokenAt: number | undefined;
  private readonly hang: boolean;
  private readonly dieAfter: number | undefined;
  /** Output tokens generated but not yet streamed (a stream interval above 1 sends them together). */
  private unsentFrom = 0;

  constructor(
    private readonly res: ServerResponse,
    private readonly batcher: Batcher,
    private readonly request: InferenceRequest,
    private readonly format: ResponseFormat,
    private readonly timing: Timing,
    private readonly streamInterval: number,
    fault?: JobFault,
    private readonly observer?: JobObserver,
  ) {
    this.hang = fault?.kind === "hang";
    this.dieAfter = fault?.kind === "die-mid-stream" ? fault.afterTokens : undefined;
  }

  /** Queues the job; with zero delays and a free slot it answers before this returns. */
  begin(): void {
    // res 'close' before we finished = the client went away (req 'close' fires after a complete body).
    this.res.once("close", this.abort);
    // Real servers send stream headers at once, before the first token; the body waits for it.
    if (this.request.stream && !this.hang) this.res.writeHead(200, SSE_HEADERS);
    this.batcher.enqueue(this);
    if (this.request.stream && !this.hang && !this.res.headersSent && !this.finished) this.res.flushHeaders();
  }

  start(): void {
    this.scheduledAt ??= performance.now();
    if (this.hang) return;
    // A resumed job prefills again (its TTFT delay) before its next token.
    this.generation = new Generation(this.batcher, this.timing, this.request.maxTokens, this, this.generated);
    this.generation.start();
  }

  kvTokens(): number {
    // The prompt, what was generated, and the token about to be: at most the whole answer.
    return this.request.promptTokens + Math.min(this.generated + 1, Math.max(1, this.request.maxTokens));
  }

  reserve(index: number): boolean {
    return this.batcher.grow(this, this.request.promptTokens + index + 1);
  }

  preempt(): void {
    this.preemptions++;
    this.generation?.cancel();
    this.generation = undefined;
  }

  emit(index: number): boolean {
    this.generated = index + 1;
    this.firstTokenAt ??= performance.now();
    if (!this.request.stream) {
      if (this.dieAfter !== undefined && index + 1 >= this.dieAfter) this.die();
      return true;
    }
    let ok = true;
    const end = index + 1;
    // Every streamInterval tokens, and at the last one (or at a fault's cut), one event carries them.
    const last = end >= this.request.maxTokens || (this.dieAfter !== undefined && end >= this.dieAfter);
    if (end - this.unsentFrom < this.streamInterval && !last) return true;
    for (const event of this.format.tokenEvents(this.unsentFrom, end)) ok = writeEvent(this.res, event);
    this.unsentFrom = end;
    if (this.dieAfter !== undefined && index + 1 >= this.dieAfter) this.die();
    return ok;
  }

  /** die-mid-stream: cut the connection after what was written so far, and free the slot. */
  private die(): void {
    if (this.finished) return;
    if (!this.request.stream) {
      const body = JSON.stringify(this.format.fullBody());
      this.res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
      });
      this.res.write(body.slice(0, Math.floor(body.length / 2)));
    }
    const socket = this.res.socket;
    this.abort();
    // Let the bytes written so far leave before the connection dies, so the client sees them: the
    // response may hold them corked until the next tick.
    setImmediate(() => {
      if (socket && !socket.destroyed) socket.end(() => socket.destroy());
    });
  }

  waitForDrain(resume: () => void): void {
    this.res.once("drain", resume);
  }

  done(): void {
    if (this.dieAfter !== undefined) {
      this.die();
      return;
    }
    this.finished = true;
    // Count it before the client can see the end, so a test reading stats after the response agrees.
    this.batcher.finish(this, "completed");
    this.observer?.({
      arrivedAt: this.arrivedAt,
      scheduledAt: this.scheduledAt ?? performance.now(),
      firstTokenAt: this.firstTokenAt,
      finishedAt: performance.now(),
      promptTokens: this.request.promptTokens,
      outputTokens: this.request.maxTokens,
      finishReason: this.request.capped || this.request.endpoint === "generate" ? "length" : "stop",
      preemptions: this.preemptions,
    });
    if (this.request.stream) {
      for (const event of this.format.endEvents()) writeEvent(this.res, event);
      endStream(this.res);
    } else {
      const body = JSON.stringify(this.format.fullBody());
      this.res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
      });
      this.res.end(body);
    }
  }

  /** Client gone or worker closing: stop generating and free the slot (or leave the queue). */
  readonly abort = (): void => {
    if (this.finished) return;
    this.finished = true;
    this.generation?.cancel();
    this.batcher.finish(this, "aborted");
  };
}
