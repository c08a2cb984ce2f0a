// @ts-check
// node --test: the role list and its hovers.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ROLE_HELP, ROLES, roleHelp } from "./roles.js";

test("every built-in role has a sentence, custom roles a generic one", () => {
  assert.deepEqual(Object.keys(ROLE_HELP).sort(), [...ROLES].sort());
  for (const role of ROLES) assert.ok(roleHelp(role).endsWith("."), role);
  assert.match(roleHelp("ema_weights"), /your rules/);
});
