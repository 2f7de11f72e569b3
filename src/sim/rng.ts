/**
 * The simulator's only source of randomness: xoshiro128** (Blackman and Vigna), seeded from a
 * string through cyrb128. Never Math.random: the same seed gives the same numbers on every run.
 *
 * Every consumer gets its own stream (`Rng.stream(seed, "tenant:chat:sizes")`), so adding a tenant,
 * a policy or a phase never shifts the numbers another consumer sees: the policies of one scenario
 * see the same arrivals.
 */

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** cyrb128: a fast 128-bit string hash, used only to seed the generator. */
function cyrb128(text: string): [number, number, number, number] {
  let h1 = 1779033703;
  let h2 = 3144134277;
  let h3 = 1013904242;
  let h4 = 2773480762;
  for (let i = 0; i < text.length; i++) {
    const k = text.charCodeAt(i);
    h1 = h2 ^ Math.imul(h1 ^ k, 597399067);
    h2 = h3 ^ Math.imul(h2 ^ k, 2869860233);
    h3 = h4 ^ Math.imul(h3 ^ k, 951274213);
    h4 = h1 ^ Math.imul(h4 ^ k, 2716044179);
  }
  h1 = Math.imul(h3 ^ (h1 >>> 18), 597399067);
  h2 = Math.imul(h4 ^ (h2 >>> 22), 2869860233);
  h3 = Math.imul(h1 ^ (h3 >>> 17), 951274213);
  h4 = Math.imul(h2 ^ (h4 >>> 19), 2716044179);
  h1 ^= h2 ^ h3 ^ h4;
  h2 ^= h1;
  h3 ^= h1;
  h4 ^= h1;
  return [h1 >>> 0, h2 >>> 0, h3 >>> 0, h4 >>> 0];
}

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  private spare = Number.NaN;

  constructor(seedText: string) {
    const [a, b, c, d] = cyrb128(seedText);
    this.a = a;
    this.b = b;
    this.c = c;
    // The all-zero state is the one state xoshiro cannot leave.
    this.d = a === 0 && b === 0 && c === 0 && d === 0 ? 1 : d;
    for (let i = 0; i < 8; i++) this.u32(); // mix the seed in
  }

  /** An independent stream for one consumer of one run. */
  static stream(seed: number, name: string): Rng {
    return new Rng(`sluice-sim:${seed}:${name}`);
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result;
  }

  /** Uniform in [0, 1), 53 bits. */
  next(): number {
    const hi = this.u32() >>> 5; // 27 bits
    const lo = this.u32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** Uniform in (0, 1]: safe under a logarithm. */
  nextOpen(): number {
    return 1 - this.next();
  }

  /** Exponential with the given mean. */
  exponential(mean: number): number {
    return -mean * Math.log(this.nextOpen());
  }

  /** Standard normal (Box-Muller, the second value kept for the next call). */
  normal(): number {
    if (!Number.isNaN(this.spare)) {
      const s = this.spare;
      this.spare = Number.NaN;
      return s;
    }
    const r = Math.sqrt(-2 * Math.log(this.nextOpen()));
    const theta = 2 * Math.PI * this.next();
    this.spare = r * Math.sin(theta);
    return r * Math.cos(theta);
  }

  /** Integer uniform in [0, n). */
  below(n: number): number {
    return Math.floor(this.next() * n);
  }
}
