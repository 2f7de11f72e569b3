/**
 * A worker's prefix cache, modelled on vLLM's automatic prefix caching: the prompt is cut into
 * blocks of BLOCK_TOKENS tokens; a block is identified by a hash chained over every block before it,
 * so a block hits only when the whole prefix up to its end is the same; an LRU of blocks holds at
 * most `capacityTokens` tokens. A request's cached tokens are its leading blocks found in the cache;
 * serving it then stores (or refreshes) all its full blocks. A partial last block is never cached,
 * as in vLLM.
 *
 * The mock worker feeds it the prompt text (4 characters a token, its tokenizer's rule); the
 * simulator feeds it block hashes it made itself. Both get the same model.
 */
import { isRecord } from "./tokens.js";

export const BLOCK_TOKENS = 16;
const CHARS_PER_TOKEN = 4;
export const BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN;

/** 2^21: the low part of a block key. Two 32-bit hashes make a 53-bit key (collisions ~ n^2 / 2^54). */
const LOW = 0x200000;

/** The chained keys of `text`'s full blocks of BLOCK_CHARS characters. */
export function blockKeys(text: string): number[] {
  const keys: number[] = [];
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  const full = text.length - (text.length % BLOCK_CHARS);
  for (let start = 0; start < full; start += BLOCK_CHARS) {
    // Each hash carries on from the previous block's: the key names the whole prefix.
    for (let i = start; i < start + BLOCK_CHARS; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
    }
    keys.push((a >>> 0) * LOW + ((b >>> 0) & (LOW - 1)));
  }
  return keys;
}

/**
 * The prompt as the worker's cache sees it: each chat message as `role\ncontent\n` (text parts in
 * order), or the completion's `prompt` / SGLang's `text` (an array's strings in order).
 */
export function promptText(body: unknown): string {
  if (!isRecord(body)) return "";
  let text = "";
  const messages = body["messages"];
  if (Array.isArray(messages)) {
    for (const m of messages) {
      if (!isRecord(m)) continue;
      const role = m["role"];
      text += `${typeof role === "string" ? role : ""}\n`;
      const content = m["content"];
      if (typeof content === "string") text += content;
      else if (Array.isArray(content)) {
        for (const part of content) {
          if (typeof part === "string") text += part;
          else if (isRecord(part) && typeof part["text"] === "string") text += part["text"];
        }
      }
      text += "\n";
    }
    return text;
  }
  const prompt = body["prompt"] ?? body["text"];
  if (typeof prompt === "string") return prompt;
  if (Array.isArray(prompt)) for (const p of prompt) if (typeof p === "string") text += p;
  return text;
}

export interface PrefixCacheCounters {
  /** The cache's size in tokens. */
  capacityTokens: number;
  /** Tokens held now. */
  storedTokens: number;
  /** Prompt tokens served and, of them, found in the cache. */
  promptTokens: number;
  cachedTokens: number;
}

export class PrefixCache {
  /** Block keys, least recently used first (a Map keeps insertion order). */
  private readonly blocks = new Map<number, true>();
  private readonly maxBlocks: number;
  private promptTokens = 0;
  private cachedTokens = 0;

  constructor(readonly capacityTokens: number) {
    if (!Number.isInteger(capacityTokens) || capacityTokens < 0) {
      throw new RangeError(`the prefix cache size must be a non-negative integer, got ${capacityTokens}`);
    }
    this.maxBlocks = Math.floor(capacityTokens / BLOCK_TOKENS);
  }

  /** Tokens of the leading blocks of `keys` found in the cache; nothing is refreshed. */
  peek(keys: readonly number[]): number {
    let hits = 0;
    while (hits < keys.length && this.blocks.has(keys[hits]!)) hits++;
    return hits * BLOCK_TOKENS;
  }

  /**
   * Serves a prompt of `tokens` tokens whose full blocks are `keys`: returns its cached tokens
   * (at most `tokens`), then stores every block as the most recently used, evicting the least.
   */
  serve(keys: readonly number[], tokens: number): number {
    const cached = Math.min(this.peek(keys), tokens);
    this.promptTokens += tokens;
    this.cachedTokens += cached;
    if (this.maxBlocks === 0) return cached;
    // Last block first, so the prompt's head is the most recent: eviction takes a prefix's tail
    // before its head, and what stays is still a usable prefix (vLLM frees blocks in this order).
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i]!;
      this.blocks.delete(key);
      this.blocks.set(key, true);
    }
    while (this.blocks.size > this.maxBlocks) this.blocks.delete(this.blocks.keys().next().value!);
    return cached;
  }

  /** Empties the cache (a restarted engine starts cold). */
  clear(): void {
    this.blocks.clear();
  }

  /** Starts the served-token counters afresh (the cache keeps its blocks). */
  resetCounters(): void {
    this.promptTokens = 0;
    this.cachedTokens = 0;
  }

  counters(): PrefixCacheCounters {
    return {
      capacityTokens: this.capacityTokens,
      storedTokens: this.blocks.size * BLOCK_TOKENS,
      promptTokens: this.promptTokens,
      cachedTokens: this.cachedTokens,
    };
  }
}
