/** The OTLP/gRPC receiver: the `svc-agent receive` command, and the in-process test backend. */
export { OtlpReceiver, decodeRequest, retryInfoMetadata, type ReceivedRequest, type ReceiverReply, type ReceiverOptions } from "./server";
export { countItems } from "./count";
export { receiveCommand, RECEIVE_HELP, summaryLine } from "./command";
