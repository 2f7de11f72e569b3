/**
 * The one binary min-heap of the code base, intrusive: each item keeps its own position (a field
 * the subclass names in `setIndex`), so an item whose key changed is re-sifted, and any item is
 * removed, in O(log n) without a search and without allocating a node per item.
 *
 * A subclass supplies the order (`less`) and where the position lives (`setIndex`). Both are
 * methods on the subclass's prototype, not closures passed in: V8 inlines a call site that sees a
 * few receiver classes, but not one that sees a few different closures, and these calls run on the
 * scheduler's contended path (fair-queue.ts) and on every request in the gateway's metrics
 * (metrics/tenant-labels.ts).
 */
export abstract class IndexedHeap<T> {
  /** The heap array: `items[0]` is the least item. Read-only to callers. */
  readonly items: T[] = [];

  /** Strict order: true when `a` must come out before `b`. */
  protected abstract less(a: T, b: T): boolean;
  /** Records that `item` now sits at `index` (the subclass's intrusive field). */
  protected abstract setIndex(item: T, index: number): void;

  get size(): number {
    return this.items.length;
  }

  /** The least item, or undefined when empty. */
  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const index = this.items.length;
    this.items.push(item);
    this.up(item, index);
  }

  /**
   * Removes the item at `index` (read from the item's own field). The removed item's field is left
   * as it was: the caller resets it when it needs a "not in the heap" mark.
   */
  removeAt(index: number): void {
    const items = this.items;
    const last = items.pop()!;
    if (index === items.length) return;
    // The last item fills the hole and moves whichever way its key says.
    this.up(last, this.down(last, index));
  }

  /** Restores order after the key of the item at `index` decreased (it may only move up). */
  decreased(index: number): void {
    this.up(this.items[index]!, index);
  }

  /** Restores order after the key of the item at `index` increased (it may only move down). */
  increased(index: number): void {
    this.down(this.items[index]!, index);
  }

  /** Moves `item`, which belongs at `index` or above, up to its place; returns where it landed. */
  private up(item: T, index: number): number {
    const items = this.items;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = items[parentIndex]!;
      if (!this.less(item, parent)) break;
      items[index] = parent;
      this.setIndex(parent, index);
      index = parentIndex;
    }
    items[index] = item;
    this.setIndex(item, index);
    return index;
  }

  /** Moves `item`, which belongs at `index` or below, down to its place; returns where it landed. */
  private down(item: T, index: number): number {
    const items = this.items;
    const n = items.length;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= n) break;
      const right = left + 1;
      let child = left;
      if (right < n && this.less(items[right]!, items[left]!)) child = right;
      const c = items[child]!;
      if (!this.less(c, item)) break;
      items[index] = c;
      this.setIndex(c, index);
      index = child;
    }
    items[index] = item;
    this.setIndex(item, index);
    return index;
  }
}
