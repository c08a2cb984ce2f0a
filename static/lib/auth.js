// @ts-check
// The write token, for servers started with --write-token or --tokens-file: a write without it
// answers 401. The token is asked for in the page (a field, never prompt()), kept for this tab
// only (sessionStorage: gone when the tab closes, never sent anywhere but this server) and sent
// as `Authorization: Bearer`, which no other site's page can make the browser send.
// This half has no DOM (the form that asks for a token is views/auth.js).

const STORAGE_KEY = "snapview.token";

/** The token this tab was given, or "". */
export function savedToken() {
  try {
    return sessionStorage.getItem(STORAGE_KEY) ?? "";
  } catch {
    // Storage disabled: the token is asked for again at each write.
    return "";
  }
}

/** Keeps `token` for this tab (nothing when storage is disabled: it is asked for again). */
export function saveToken(token) {
  try {
    sessionStorage.setItem(STORAGE_KEY, token);
  } catch {
    // Storage disabled: see savedToken.
  }
}

/** `headers` plus the tab's token, if it has one. */
export function withToken(headers = {}) {
  const token = savedToken();
  return token ? { ...headers, Authorization: `Bearer ${token}` } : headers;
}

/** What a person is told the first time a write is refused. */
export const NEEDS_TOKEN = "This server needs a write token to add or change snapshots.";

/** What to say when a token was refused with 401: the server's words, or ours. */
export async function refusal(response) {
  const body = await response
    .clone()
    .json()
    .catch(() => null);
  return body?.error?.message ?? "This server needs a token to change snapshots.";
}
