// @ts-check
// Building DOM nodes: the element builder every view uses, and a file download.

/**
 * `h("div", {className: "x", title: "y"}, child, "text")`. Props go to the element's property of
 * the same name where it has one, else to an attribute (`true` makes an empty one); `on*` add
 * listeners and `dataset` fills data attributes. A `style` string goes through the CSSOM
 * (`element.style`), which the page's CSP (`style-src 'self'`) allows where it refuses a `style=`
 * attribute in markup; views use it only for a computed colour (timeline/side.js's role chips).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, any> | null} [props]
 * @param {...(Node | string | number | null | undefined | false | (Node | string | number | null | undefined | false)[])} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key in element && key !== "list") /** @type {Record<string, any>} */ (element)[key] = value;
    else element.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/**
 * Downloads `text` as a file named `name`.
 * @param {string} name
 * @param {string} text
 * @param {string} type the MIME type
 */
export function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
