/** Status aggregation: component states -> health, readiness and the named status views behind /status*. */
export { StatusAggregator, READINESS_CHECKS, type ComponentStatus, type Health, type Readiness, type ViewProvider } from "./aggregator";
export * from "./model";
