/**
 * `default_model`: a request whose JSON body names no model is routed to the default model's pool,
 * and the worker is told which model it asked for. The key goes in before the closing brace, so
 * every byte the client sent reaches the worker as sent, and it wins over a `"model": null` the
 * client sent (JSON parsers keep a duplicate key's last value).
 */
export function withDefaultModel(
  body: Buffer,
  json: Record<string, unknown> | undefined,
  model: string,
): Buffer {
  if (json === undefined) return body;
  const close = body.lastIndexOf(0x7d); // "}": the last non-blank byte, since the body parsed as an object
  if (close < 0) return body;
  const empty = Object.keys(json).length === 0;
  const key = Buffer.from(`${empty ? "" : ","}"model":${JSON.stringify(model)}`);
  return Buffer.concat([body.subarray(0, close), key, body.subarray(close)]);
}
