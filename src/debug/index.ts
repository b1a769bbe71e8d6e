/** Debug endpoints' content: runtime variables and pprof-format profiles of the agent itself. */
export { debugVars } from "./vars";
export { PROFILES, profileResponse, type ProfileName } from "./profiles";
