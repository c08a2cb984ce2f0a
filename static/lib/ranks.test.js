// @ts-check
// node --test: which dropped files are offered as the ranks of one job.

import assert from "node:assert/strict";
import { test } from "node:test";
import { rankGroup, rankOf, traceShape } from "./ranks.js";

const summary = (...devices) => ({ devices: devices.map((device) => ({ device, trace_entries: 10 })) });

test("a rank is read from the usual spellings, the stem without it and the extension", () => {
  assert.deepEqual(rankOf("job7-rank3.pickle"), { rank: 3, stem: "job7" });
  assert.deepEqual(rankOf("snapshot-oom-rank12.pickle.zst"), { rank: 12, stem: "snapshot-oom" });
  assert.deepEqual(rankOf("rank_0_train.pickle"), { rank: 0, stem: "train" });
  assert.equal(rankOf("ranking.pickle"), null);
  assert.equal(rankOf("run.pickle"), null);
});

test("ranks of one stem and one shape are a group; anything else is not", () => {
  const files = ["a-rank0.pickle", "a-rank1.pickle", "a-rank2.pickle"].map((filename) => ({ filename, summary: summary(0) }));
  assert.equal(rankGroup(files), "a");
  assert.equal(rankGroup(files.slice(0, 1)), null, "one file is no group");
  assert.equal(rankGroup([files[0], { ...files[1], filename: "b-rank1.pickle" }]), null, "two stems");
  assert.equal(rankGroup([files[0], { ...files[1], filename: "a-rank0.pickle" }]), null, "the same rank twice");
  assert.equal(rankGroup([files[0], { ...files[1], summary: summary(0, 1) }]), null, "another trace shape");
  assert.equal(rankGroup([files[0], { filename: "notes.pickle", summary: summary(0) }]), null, "a name without a rank");
});

test("the shape counts only devices with a trace, whatever their ordinals", () => {
  assert.equal(
    traceShape({
      devices: [
        { device: 0, trace_entries: 0 },
        { device: 1, trace_entries: 5 },
      ],
    }),
    1,
  );
  assert.equal(traceShape(summary(1)), traceShape(summary(0)), "rank 1 on cuda:1 is shaped like rank 0 on cuda:0");
  assert.equal(traceShape(undefined), 0);
});
