// @ts-check
// Pure (no DOM): whether several uploaded files look like the ranks of one job, so the list page
// can offer to group them. A file name says its rank (`rank3`, `rank_3`, `rank-3`), the rest of
// the name (the stem) is the same for all, and their traces have the same shape (the same
// number of devices recorded).

/** The rank and the stem (the name without the rank and the extension) of a file name, or null. */
export function rankOf(filename) {
  const base = String(filename).replace(/(\.(pickle|pkl|json))?(\.(gz|zst))?$/i, "");
  const match = /^(.*?)[-_.]?rank[-_]?(\d{1,6})(.*)$/i.exec(base);
  if (!match) return null;
  const stem = `${match[1]}${match[3]}`.replace(/^[-_.]+|[-_.]+$/g, "");
  return { rank: Number(match[2]), stem };
}

/** How many devices a stored snapshot's summary recorded a trace for: each rank of a job
 * usually records its own GPU (rank 1 on cuda:1), so the count is compared, not the ordinals. */
export function traceShape(summary) {
  const devices = summary?.devices ?? [];
  return devices.filter((d) => d.trace_entries > 0).length;
}

/**
 * A group name to offer for `uploads` (each `{filename, summary}`), or null when they do not look
 * like the ranks of one job: at least two, every name with a distinct rank and one stem, and the
 * same trace shape.
 */
export function rankGroup(uploads) {
  if (uploads.length < 2) return null;
  const parsed = uploads.map((u) => rankOf(u.filename));
  if (parsed.some((p) => p === null)) return null;
  const stems = new Set(parsed.map((p) => p.stem.toLowerCase()));
  const ranks = new Set(parsed.map((p) => p.rank));
  const shapes = new Set(uploads.map((u) => traceShape(u.summary)));
  if (stems.size !== 1 || ranks.size !== uploads.length || shapes.size !== 1) return null;
  return parsed[0].stem || "ranks";
}
