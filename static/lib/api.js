// @ts-check
// Pure (no DOM): reading the server's JSON API with errors a person can read, and allocation
// details cached per (snapshot, device, id).

/**
 * GETs JSON; throws an Error whose message a person can read (aborts rethrow as AbortError).
 * @param {string} url
 * @param {AbortSignal} [signal]
 * @returns {Promise<any>}
 */
export async function getJSON(url, signal) {
  let response;
  try {
    response = await fetch(url, { signal });
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new Error("The server could not be reached. Is snapview still running?");
  }
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    const message = body?.error?.message ?? `${response.status} ${response.statusText}`;
    throw new Error(`The server answered: ${message}`);
  }
  return response.json();
}

/** Allocation details by "snapshot/device/id"; a failed fetch leaves the cache so it is retried. */
/** @type {Map<string, Promise<any>>} */
const allocationCache = new Map();

/**
 * An allocation's details (`/api/snapshots/{snapshot}/allocations/{n}`), fetched once.
 * @param {string} snapshot
 * @param {number} device
 * @param {number} n the allocation's id
 * @returns {Promise<any>}
 */
export function allocation(snapshot, device, n) {
  const key = `${snapshot}/${device}/${n}`;
  let promise = allocationCache.get(key);
  if (!promise) {
    promise = getJSON(`/api/snapshots/${snapshot}/allocations/${n}?device=${device}`);
    promise.catch(() => allocationCache.delete(key));
    allocationCache.set(key, promise);
  }
  return promise;
}
