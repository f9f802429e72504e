// The few parts of Node.js's test runner, assert and stream modules the
// SDK's tests use, declared here so that they compile with no @types/node.

declare module "node:test" {
  export default function test(name: string, fn: () => void | Promise<void>): Promise<void>;
}

declare module "node:assert/strict" {
  interface Assert {
    (value: unknown, message?: string): asserts value;
    equal<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    deepEqual<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    match(value: string, pattern: RegExp, message?: string): void;
    ok(value: unknown, message?: string): asserts value;
    throws(fn: () => unknown, expected?: RegExp | ((err: unknown) => boolean), message?: string): void;
  }
  const assert: Assert;
  export default assert;
}

declare module "node:stream" {
  export class PassThrough {
    write(chunk: string, callback?: (error?: Error | null) => void): boolean;
    end(chunk?: string): this;
    on(event: string, listener: (...args: never[]) => void): this;
    setEncoding(encoding: "utf8"): this;
    [Symbol.asyncIterator](): AsyncIterator<string>;
  }
}

declare function setTimeout(callback: (...args: never[]) => void, ms?: number): unknown;
