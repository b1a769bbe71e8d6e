/** The OTLP/gRPC receiver: the server behind `svc-agent receive` (src/cli/receive.ts) and the in-process test backend. */
export { OtlpReceiver, decodeRequest, retryInfoMetadata, type ReceivedRequest, type ReceiverReply, type ReceiverOptions } from "./server";
export { countItems } from "./count";
