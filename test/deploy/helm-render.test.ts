/**
 * The chart renderer (deploy/helm/render.ts) against Go text/template and Helm semantics, case by case,
 * for the subset the chart uses: trim markers, comments, if/else if/else, with/else, range over lists and
 * maps (sorted keys), variables and $, define/include, pipelines (the piped value is the last argument),
 * and the functions. Expected outputs are what Go's text/template and Helm print for the same input.
 */
import { describe, expect, test } from "bun:test";
import { Renderer, TemplateError, mergeValues, setValue } from "../../deploy/helm/render";

function render(src: string, root: unknown = {}, strict = true): string {
  const r = new Renderer();
  r.add("t", src);
  return r.render("t", root, strict);
}

describe("Go template subset", () => {
  test("trim markers remove the whitespace on their side only", () => {
    expect(render("a  {{- 1 -}}  b")).toBe("a1b");
    expect(render("a  {{ 1 }}  b")).toBe("a  1  b");
    expect(render("x:\n  {{- if true }}\n  y{{ end }}")).toBe("x:\n  y");
    expect(render("{{/* a comment */}}z")).toBe("z");
    expect(render("a {{- /* trimmed comment */ -}} b")).toBe("ab");
  });

  test("if / else if / else follow Go truthiness (empty string, 0, empty list and map are false)", () => {
    const t = '{{ if .a }}A{{ else if .b }}B{{ else }}C{{ end }}';
    expect(render(t, { a: "x", b: true })).toBe("A");
    expect(render(t, { a: "", b: 1 })).toBe("B");
    expect(render(t, { a: [], b: {} })).toBe("C");
    expect(render(t, { a: 0, b: false })).toBe("C");
  });

  test("with rebinds the dot; range walks lists in order and maps by sorted key; $ stays the root", () => {
    expect(render("{{ with .m }}{{ .k }}{{ else }}none{{ end }}", { m: { k: "v" } })).toBe("v");
    expect(render("{{ with .m }}{{ .k }}{{ else }}none{{ end }}", { m: {} })).toBe("none");
    expect(render("{{ range .l }}[{{ . }}]{{ end }}", { l: [3, 1, 2] })).toBe("[3][1][2]");
    expect(render("{{ range $k, $v := .m }}{{ $k }}={{ $v }};{{ end }}", { m: { b: 2, a: 1 } })).toBe("a=1;b=2;");
    expect(render("{{ range .l }}{{ $.name }}{{ end }}", { l: [1, 2], name: "n" })).toBe("nn");
    expect(render("{{ range .l }}x{{ else }}empty{{ end }}", { l: [] })).toBe("empty");
    expect(render('{{ $x := "v" }}{{ if true }}{{ $x }}{{ end }}')).toBe("v");
  });

  test("define and include; a pipeline passes its value as the last argument", () => {
    const r = new Renderer();
    r.add("h", '{{- define "greet" -}}hi {{ .who }}{{- end -}}');
    r.add("t", '{{ include "greet" . | quote }} {{ "a-b-" | trimSuffix "-" }} {{ "abcdef" | trunc 3 }}');
    expect(r.render("t", { who: "you" })).toBe('"hi you" a-b abc');
  });

  test("toYaml sorts keys and drops the final newline; nindent and indent prefix every line", () => {
    expect(render("k:{{ toYaml .m | nindent 2 }}", { m: { b: [1, 2], a: "x" } })).toBe("k:\n  a: x\n  b:\n    - 1\n    - 2");
    expect(render('{{ "a\\nb" | indent 3 }}')).toBe("   a\n   b");
  });

  test("functions: default, quote, printf, splitList/last/int, eq/ne/not/and/or, sha256sum, b64enc, required", () => {
    expect(render('{{ .x | default "d" }}|{{ .y | default "d" }}', { x: "", y: "v" })).toBe("d|v");
    expect(render('{{ printf "%s-%d" "a" 7 }}')).toBe("a-7");
    expect(render('{{ splitList ":" ":19090" | last | int }}')).toBe("19090");
    expect(render('{{ splitList ":" "[::1]:8080" | last | int }}')).toBe("8080");
    expect(render('{{ eq 1 1 }} {{ ne "a" "b" }} {{ not "" }} {{ and 1 0 }} {{ or 0 "x" }}')).toBe("true true true 0 x");
    expect(render('{{ "abc" | sha256sum }}')).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect(render('{{ "abc" | b64enc }}')).toBe("YWJj");
    expect(() => render('{{ required "give x" .x }}', { x: "" })).toThrow("required: give x");
  });

  test("a missing value is an error in strict mode, empty otherwise; unknown functions are errors", () => {
    expect(() => render("{{ .Values.nope }}", { Values: {} })).toThrow(TemplateError);
    expect(render("[{{ .Values.nope }}]", { Values: {} }, false)).toBe("[]");
    expect(() => render("{{ frobnicate 1 }}")).toThrow("unknown function frobnicate");
    expect(() => render("{{ constructor }}")).toThrow("unknown function constructor");
    expect(() => render("{{ if true }}x")).toThrow("missing {{ end }}");
  });

  test("--set and values merging work like Helm's (deep merge, lists replaced, scalars typed)", () => {
    const base = { a: { b: 1, c: [1, 2] }, d: "x" };
    expect(mergeValues(base, { a: { c: [3] } })).toEqual({ a: { b: 1, c: [3] }, d: "x" });
    expect(setValue(base, "a.b=false")).toEqual({ a: { b: false, c: [1, 2] }, d: "x" });
    expect(setValue(base, "e.f=42")).toEqual({ ...base, e: { f: 42 } });
  });
});
