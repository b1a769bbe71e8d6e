/**
 * prom-client's classes from their own modules (the package has no exports map; these are its lib files). The
 * package's index also loads what the agent never uses: the push gateway (http, https), the default process
 * metrics, summaries and the cluster aggregator (node:cluster); that was ~9 ms of module evaluation at start-up
 * (a compiled binary importing the index: 10.5-16.9 ms to its first line; importing these four: 4.0-5.2 ms; empty:
 * 2.3-3.1 ms). The types are the package's own.
 */
declare module "prom-client/lib/registry" {
  import { Registry } from "prom-client";
  export = Registry;
}
declare module "prom-client/lib/counter" {
  import { Counter } from "prom-client";
  export = Counter;
}
declare module "prom-client/lib/gauge" {
  import { Gauge } from "prom-client";
  export = Gauge;
}
declare module "prom-client/lib/histogram" {
  import { Histogram } from "prom-client";
  export = Histogram;
}
