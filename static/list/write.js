// @ts-check
// Writes from the list page: each asks for the tab's write token when the server wants one.

import { writeFetch } from "../views/auth.js";

/**
 * Sends `method` to `url` with the tab's write token (asking for one on 401), and `json` as the
 * body when given; throws with the server's message when it refuses.
 * @param {string} method
 * @param {string} url
 * @param {object} [json]
 */
export async function send(method, url, json) {
  const init = json === undefined ? { method } : { method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(json) };
  const response = await writeFetch(url, init);
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new Error(body?.error?.message ?? `the server answered ${response.status}`);
  }
  return response;
}

/**
 * Changes a stored snapshot's fields (name, group); a refusal throws the server's own message.
 * @param {string} id
 * @param {{name?: string, group?: string}} fields
 */
export async function patchSnapshot(id, fields) {
  await send("PATCH", `/api/snapshots/${id}`, fields);
}
