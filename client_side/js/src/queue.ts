// The one async iterator behind view.events(), chunks() and agUiEvents(): a producer pushes values
// as they come and ends the queue; a reader awaits them with `for await`. Values pushed before the
// end are still read after it; return() (a `break` out of the loop) drops them and ends at once.

/**
 * A queue read as an async iterator. `push` adds a value (ignored once ended), `end` says no more
 * will come and calls `stop` once (the producer unsubscribes there). @internal
 */
export class IteratorQueue<T> implements AsyncIterableIterator<T> {
  private readonly buffer: T[] = [];
  private wake: ((result: IteratorResult<T>) => void) | null = null;
  private done = false;

  constructor(private readonly stop: () => void = () => {}) {}

  /** True once `end` or `return` was called. */
  get ended(): boolean {
    return this.done;
  }

  push(value: T): void {
    if (this.done) return;
    const wake = this.wake;
    if (wake !== null) {
      this.wake = null;
      wake({ value, done: false });
    } else this.buffer.push(value);
  }

  end(): void {
    if (this.done) return;
    this.done = true;
    this.stop();
    const wake = this.wake;
    if (wake !== null) {
      this.wake = null;
      wake({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<T>> {
    if (this.buffer.length) return Promise.resolve({ value: this.buffer.shift() as T, done: false });
    if (this.done) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => {
      this.wake = resolve;
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.buffer.length = 0;
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
