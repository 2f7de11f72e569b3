/**
 * Fake tokenizer: deterministic output words and a characters/4 prompt estimate,
 * so tests can predict content and usage numbers exactly.
 */

/** Text of output token `index`: "tok0", " tok1", " tok2", ... (joined they read "tok0 tok1 tok2"). */
function tokenText(index: number): string {
  return index === 0 ? "tok0" : ` tok${index}`;
}

/** The text of output tokens `from` .. `to - 1`. */
export function tokensText(from: number, to: number): string {
  let text = "";
  for (let i = from; i < to; i++) text += tokenText(i);
  return text;
}

/** The full output of `count` tokens. */
export function generatedText(count: number): string {
  return tokensText(0, count);
}

/** prompt_tokens = ceil(characters / 4), the usual rule of thumb for English text. */
export function tokensForChars(chars: number): number {
  return Math.ceil(chars / 4);
}

/** Characters of an OpenAI message content: a string or an array of parts ({type:"text", text}). */
function contentChars(content: unknown): number {
  if (typeof content === "string") return content.length;
  if (!Array.isArray(content)) return 0;
  let chars = 0;
  for (const part of content) {
    if (typeof part === "string") chars += part.length;
    else if (isRecord(part) && typeof part["text"] === "string") chars += part["text"].length;
  }
  return chars;
}

/** Characters of all messages' contents of a chat request. */
export function messagesChars(messages: unknown): number {
  if (!Array.isArray(messages)) return 0;
  let chars = 0;
  for (const m of messages) if (isRecord(m)) chars += contentChars(m["content"]);
  return chars;
}

/**
 * Prompt tokens of a completions `prompt` (or SGLang `text`): a string, an array of strings,
 * or pre-tokenized ids (an array of numbers counts one token per id).
 */
export function promptTokens(prompt: unknown): number {
  if (typeof prompt === "string") return tokensForChars(prompt.length);
  if (!Array.isArray(prompt)) return 0;
  let chars = 0;
  let ids = 0;
  for (const p of prompt) {
    if (typeof p === "string") chars += p.length;
    else if (typeof p === "number") ids++;
    else if (Array.isArray(p)) ids += p.length;
  }
  return tokensForChars(chars) + ids;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
