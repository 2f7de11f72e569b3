/**
 * Tenant access windows such as "Mon-Fri 08:00-20:00 UTC": a day or day range, a time range, and
 * the zone (UTC only, so a window means the same thing on every replica). An end before the start
 * is an overnight window belonging to the day it starts on; "24:00" ends at midnight.
 */

const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

export interface AccessWindow {
  readonly text: string;
  /** days[d] = the window opens on weekday d (0 = Sunday). */
  readonly days: readonly boolean[];
  readonly startMin: number;
  readonly endMin: number;
}

function day(name: string): number {
  const i = DAYS.indexOf(name.toLowerCase().slice(0, 3));
  if (i < 0 || name.length < 3) throw new Error(`unknown day "${name}" (use Mon, Tue, ... Sun)`);
  return i;
}

function minutes(hhmm: string): number {
  const m = /^(\d{1,2}):(\d{2})$/.exec(hhmm);
  if (!m) throw new Error(`"${hhmm}" is not a time (use HH:MM)`);
  const h = Number(m[1]);
  const min = Number(m[2]);
  if (h > 24 || min > 59 || (h === 24 && min !== 0)) throw new Error(`"${hhmm}" is not a time of day`);
  return h * 60 + min;
}

/** Parses one window; throws an Error whose message says what is wrong. */
export function parseAccessWindow(text: string): AccessWindow {
  const parts = text.trim().split(/\s+/);
  if (parts.length !== 3) throw new Error(`"${text}" must look like "Mon-Fri 08:00-20:00 UTC"`);
  const [dayPart, timePart, zone] = parts as [string, string, string];
  if (zone.toUpperCase() !== "UTC") throw new Error(`"${text}": only UTC windows are supported`);
  const days = [false, false, false, false, false, false, false];
  for (const piece of dayPart.split(",")) {
    const ends = piece.split("-");
    if (ends.length > 2) throw new Error(`"${text}": "${piece}" is not a day or a day range such as Mon-Fri`);
    const [a, b] = ends;
    const from = day(a!);
    const to = b === undefined ? from : day(b);
    for (let d = from; ; d = (d + 1) % 7) {
      days[d] = true;
      if (d === to) break;
    }
  }
  const range = timePart.split("-");
  if (range.length !== 2) throw new Error(`"${text}": time range must look like 08:00-20:00`);
  const startMin = minutes(range[0]!);
  const endMin = minutes(range[1]!);
  if (startMin === 24 * 60) throw new Error(`"${text}": a window cannot start at 24:00 (use 00:00)`);
  if (startMin === endMin) throw new Error(`"${text}": the window is empty`);
  return { text, days, startMin, endMin };
}

/** True when the instant (epoch ms) falls inside the window. */
export function inWindow(window: AccessWindow, epochMs: number): boolean {
  const date = new Date(epochMs);
  const weekday = date.getUTCDay();
  const minute = date.getUTCHours() * 60 + date.getUTCMinutes();
  if (window.startMin < window.endMin) {
    return window.days[weekday]! && minute >= window.startMin && minute < window.endMin;
  }
  // Overnight: the evening part belongs to today, the morning part to yesterday's window.
  if (minute >= window.startMin) return window.days[weekday]!;
  return minute < window.endMin && window.days[(weekday + 6) % 7]!;
}
