import { describe, expect, test } from "bun:test";
import { OVERFLOW_ROUTE, RouteTemplater, heuristicRoute, templateSegment } from "../../../../../src/collectors/network/http/routes";

describe("route templates", () => {
  test("numeric, UUID, hex and long-token segments become placeholders; words stay", () => {
    expect(templateSegment("123")).toBe("{id}");
    expect(templateSegment("3f2504e0-4f89-11d3-9a0c-0305e82c3301")).toBe("{uuid}");
    expect(templateSegment("deadbeef01")).toBe("{hex}");
    expect(templateSegment("a1b2c3d4e5f6g7h8i9")).toBe("{token}");
    expect(templateSegment("x".repeat(40))).toBe("{token}");
    expect(templateSegment("users")).toBe("users");
    expect(templateSegment("deadbeef")).toBe("deadbeef");
    expect(heuristicRoute("/users/42/orders/7")).toBe("/users/{id}/orders/{id}");
    expect(heuristicRoute("/")).toBe("/");
    expect(heuristicRoute("/files/abcdefgh", true)).toBe("/files/{truncated}");
  });

  test("configured templates win, per service first, then for every service", () => {
    const t = new RouteTemplater({ templates: ["/items/{name}"], byService: { shop: ["/items/{sku}", "/carts/{id}/lines"] }, maxRoutes: 10 });
    expect(t.route("shop", "/items/apple")).toBe("/items/{sku}");
    expect(t.route("other", "/items/apple")).toBe("/items/{name}");
    expect(t.route("shop", "/carts/9/lines")).toBe("/carts/{id}/lines");
    expect(t.route("other", "/carts/x/lines")).toBe("/carts/x/lines");
  });

  test("at most maxRoutes routes per service; further paths count under the overflow route", () => {
    const t = new RouteTemplater({ templates: [], maxRoutes: 3 });
    const routes = new Set<string>();
    for (let i = 0; i < 1000; i++) routes.add(t.route("a", `/p/w${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26) % 26)}`));
    expect(routes.size).toBe(4);
    expect(routes.has(OVERFLOW_ROUTE)).toBe(true);
    expect(t.routesOf("a").length).toBe(3);
    // A known route keeps its name once the service is full; another service has its own room.
    expect(t.route("a", "/p/waa")).toBe("/p/waa");
    expect(t.route("b", "/p/zzz")).toBe("/p/zzz");
    // Templated paths share one route.
    const u = new RouteTemplater({ templates: [], maxRoutes: 1 });
    for (let i = 0; i < 100; i++) expect(u.route("s", `/users/${i}`)).toBe("/users/{id}");
  });

  test("peek names the route a path would get without taking room for it", () => {
    const t = new RouteTemplater({ templates: [], maxRoutes: 1 });
    expect(t.peek("s", "/a/x")).toBe("/a/x");
    expect(t.peek("s", "/b/y")).toBe("/b/y");
    expect(t.routesOf("s")).toEqual([]);
    expect(t.route("s", "/users/1")).toBe("/users/{id}");
    expect(t.peek("s", "/users/2")).toBe("/users/{id}");
    expect(t.peek("s", "/a/x")).toBe(OVERFLOW_ROUTE);
    expect(t.routesOf("s")).toEqual(["/users/{id}"]);
    expect(t.overflowed).toBe(0);
  });
});
