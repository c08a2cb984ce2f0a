// @ts-check
// The page of a snapshot the server is still reading (templates/loading.html): its load card
// (static/views/loads.js) follows GET /api/snapshots/{id}/status, and the page reloads into the
// snapshot's full page when it is ready (or, when the snapshot went away meanwhile, into the
// page that says so). A failed load shows the server's reason and stops asking.

import { followLoads } from "./views/loads.js";
import { showTimes } from "./views/page.js";

showTimes(document.querySelector(".snapshot.loading"));
const outcome = await followLoads(document.getElementById("load-card")).settled;
if (outcome !== "failed") window.location.reload();
