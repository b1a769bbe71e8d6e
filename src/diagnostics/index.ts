/**
 * The diagnostics bundle (`svc-agent diagnostics`): a tar.gz of the sanitized configuration, the running agent's
 * answers (status, metrics, eBPF objects, recent logs), kernel facts, and a manifest of what is in it and missing.
 */
export { collectBundle, kernelInfo, agentUrlOf, type Bundle, type BundleFile, type Missing } from "./collect";
export { tarGz, type TarEntry } from "./tar";
