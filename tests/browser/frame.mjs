// Browser test of framing (issue 18, item 8): a page on ANOTHER origin (as a notebook is: a
// different port) shows a snapshot page in an <iframe>. The server at SNAPVIEW_URL allows it
// (`--frame-ancestors http://127.0.0.1:*`, what `snapview.show()`'s local server allows), so the
// frame draws its timeline; the server at SNAPVIEW_TEST_UNFRAMEABLE_URL has the default (no
// framing), so the frame stays empty. Both are judged by the iframe's own pixels.
//
//   snapview serve --addr 127.0.0.1:7979 --frame-ancestors 'http://127.0.0.1:*' &
//   snapview serve --addr 127.0.0.1:7980 --data-dir /tmp/other &
//   SNAPVIEW_URL=http://127.0.0.1:7979 SNAPVIEW_TEST_UNFRAMEABLE_URL=http://127.0.0.1:7980 node tests/browser/frame.mjs

import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { inflateSync } from "node:zlib";
import { assert, BASE, drawn, FIXTURES, newContext, run, SHOTS, step, until, upload } from "./harness.mjs";

const UNFRAMEABLE = (process.env.SNAPVIEW_TEST_UNFRAMEABLE_URL ?? "").replace(/\/+$/, "");
if (!UNFRAMEABLE) {
  console.error("Set SNAPVIEW_TEST_UNFRAMEABLE_URL to a server with the default framing");
  process.exit(2);
}

/** Uploads a fixture to a server other than BASE; its page's URL. */
async function uploadTo(base, name) {
  const response = await fetch(`${base}/api/snapshots?filename=${name}`, { method: "POST", body: readFileSync(join(FIXTURES, name)) });
  assert(response.status === 201 || response.status === 200, `upload to ${base}: ${response.status}`);
  return (await response.json()).url;
}

/**
 * Decodes a PNG (8-bit RGB or RGBA, not interlaced: what Chromium's screenshots are) into
 * [width, height, channels, pixels].
 */
function decodePng(png) {
  let offset = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const data = [];
  while (offset < png.length) {
    const length = png.readUInt32BE(offset);
    const type = png.toString("ascii", offset + 4, offset + 8);
    const chunk = png.subarray(offset + 8, offset + 8 + length);
    if (type === "IHDR") {
      width = chunk.readUInt32BE(0);
      height = chunk.readUInt32BE(4);
      assert(chunk[8] === 8 && chunk[12] === 0, "an 8-bit, non-interlaced PNG");
      channels = { 2: 3, 6: 4 }[chunk[9]];
      assert(channels, `a PNG of RGB or RGBA, not colour type ${chunk[9]}`);
    } else if (type === "IDAT") {
      data.push(chunk);
    }
    offset += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(data));
  const stride = width * channels;
  const pixels = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y += 1) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x += 1) {
      const left = x >= channels ? pixels[y * stride + x - channels] : 0;
      const up = y > 0 ? pixels[(y - 1) * stride + x] : 0;
      const upLeft = y > 0 && x >= channels ? pixels[(y - 1) * stride + x - channels] : 0;
      let predicted = 0;
      if (filter === 1) predicted = left;
      else if (filter === 2) predicted = up;
      else if (filter === 3) predicted = (left + up) >> 1;
      else if (filter === 4) {
        const p = left + up - upLeft;
        const [pa, pb, pc] = [Math.abs(p - left), Math.abs(p - up), Math.abs(p - upLeft)];
        predicted = pa <= pb && pa <= pc ? left : pb <= pc ? up : upLeft;
      }
      pixels[y * stride + x] = (line[x] + predicted) & 0xff;
    }
  }
  return [width, height, channels, pixels];
}

/**
 * The share of an element's screenshot in colour (a channel spread over 60: the timeline's
 * bands; text, the page's background and Chromium's grey "refused to connect" icon are not).
 */
async function colouredShare(page, selector, name) {
  const png = await page.locator(selector).screenshot({ path: join(SHOTS, `${name}.png`), animations: "disabled" });
  const [width, height, channels, pixels] = decodePng(png);
  let coloured = 0;
  for (let i = 0; i < width * height * channels; i += channels) {
    const [r, g, b] = [pixels[i], pixels[i + 1], pixels[i + 2]];
    if (Math.max(r, g, b) - Math.min(r, g, b) > 60) coloured += 1;
  }
  return coloured / (width * height);
}

// The "notebook": a page on its own port (another origin) with one iframe of the given URL.
const notebook = createServer((request, response) => {
  const src = new URL(request.url, "http://127.0.0.1").searchParams.get("src") ?? "";
  const escaped = src.replace(/[&"<>]/g, (c) => `&#${c.charCodeAt(0)};`);
  response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
  response.end(`<!doctype html><title>notebook</title><body style="margin:0;background:#fff">
<iframe id="shown" src="${escaped}" width="1200" height="800" style="border:0"></iframe></body>`);
});
await new Promise((resolve) => notebook.listen(0, "127.0.0.1", resolve));
const NOTEBOOK = `http://127.0.0.1:${notebook.address().port}`;

await run(90_000, async (browser) => {
  // The refused frame is on purpose: Chromium logs its CSP violation as a console error.
  const context = await newContext(browser, {}, (text) => /frame-ancestors|Refused to frame|refused to connect/i.test(text));
  const page = await context.newPage();

  await step("a server with --frame-ancestors is drawn inside another origin's iframe", async () => {
    const { url } = await upload(join(FIXTURES, "oom.pickle"));
    await page.goto(`${NOTEBOOK}/?src=${encodeURIComponent(`${url}?tab=timeline`)}`);
    const frame = await until(() => page.frames().find((f) => f.url().startsWith(BASE)), "the snapshot page in the frame");
    const ink = await drawn(frame, "#timeline-canvas", 0.05);
    const share = await colouredShare(page, "#shown", "frame-allowed");
    assert(share > 0.01, `the framed page's pixels are drawn: ${(share * 100).toFixed(2)}% in colour (timeline ink ${ink.toFixed(3)})`);
    console.log(`      framed: ${(share * 100).toFixed(1)}% of the iframe in colour`);
  });

  await step("a server with the default framing stays empty in the same iframe", async () => {
    const url = await uploadTo(UNFRAMEABLE, "oom.pickle");
    await page.goto(`${NOTEBOOK}/?src=${encodeURIComponent(`${url}?tab=timeline`)}`);
    // Give a frame that would load the time to draw before judging it empty.
    const frame = await until(() => page.frames().find((f) => f !== page.mainFrame()), "the iframe");
    await page.waitForTimeout(1500);
    assert(!frame.url().startsWith(UNFRAMEABLE) || (await frame.locator("#timeline-canvas").count()) === 0, `blocked, but the frame shows ${frame.url()}`);
    const share = await colouredShare(page, "#shown", "frame-refused");
    assert(share < 0.001, `nothing of the page is drawn: ${(share * 100).toFixed(2)}% in colour`);
  });
});
