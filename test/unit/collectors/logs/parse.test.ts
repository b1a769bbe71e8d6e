import { describe, expect, test } from "bun:test";
import { parseCri, parseDocker, parseLine, parseRfc3339Nano } from "../../../../src/collectors/logs/parse";
import { attributesOfPath, containerIdOfPath, splitPattern } from "../../../../src/collectors/logs/paths";

const ID = "a".repeat(64);

describe("log line formats", () => {
  test("RFC 3339 times keep nanoseconds and honour offsets", () => {
    expect(parseRfc3339Nano("2024-01-02T03:04:05.123456789Z")).toBe(1704164645123456789n);
    expect(parseRfc3339Nano("2024-01-02T04:04:05.5+01:00")).toBe(1704164645500000000n);
    expect(parseRfc3339Nano("2024-01-02T03:04:05Z")).toBe(1704164645000000000n);
    expect(parseRfc3339Nano("yesterday")).toBeUndefined();
  });

  test("CRI full and partial lines", () => {
    expect(parseCri("2024-01-02T03:04:05.000000001Z stdout F hello world")).toEqual({
      timeUnixNano: 1704164645000000001n, stream: "stdout", partial: false, message: "hello world", format: "cri",
    });
    const p = parseCri("2024-01-02T03:04:05Z stderr P part one ");
    expect(p?.partial).toBe(true);
    expect(p?.stream).toBe("stderr");
    expect(p?.message).toBe("part one ");
    expect(parseCri("2024-01-02T03:04:05Z stdout F")?.message).toBe("");
    expect(parseCri("not a cri line")).toBeUndefined();
  });

  test("Docker json-file lines, partial when the newline is missing", () => {
    const d = parseDocker('{"log":"hi \\"there\\"\\n","stream":"stderr","time":"2024-01-02T03:04:05.25Z"}');
    expect(d).toEqual({ timeUnixNano: 1704164645250000000n, stream: "stderr", partial: false, message: 'hi "there"', format: "docker" });
    expect(parseDocker('{"log":"no newline","stream":"stdout","time":"2024-01-02T03:04:05Z"}')?.partial).toBe(true);
    expect(parseDocker("{broken")).toBeUndefined();
  });

  test("auto detects per line and keeps unknown lines raw; a configured format falls back to raw", () => {
    expect(parseLine("2024-01-02T03:04:05Z stdout F x", "auto").format).toBe("cri");
    expect(parseLine('{"log":"x\\n","stream":"stdout"}', "auto").format).toBe("docker");
    expect(parseLine("plain text", "auto")).toMatchObject({ format: "raw", message: "plain text" });
    expect(parseLine("plain text", "cri").format).toBe("raw");
    expect(parseLine("2024-01-02T03:04:05Z stdout F x", "raw").message).toBe("2024-01-02T03:04:05Z stdout F x");
  });
});

describe("log paths", () => {
  test("kubelet container symlink names carry pod, namespace, container and id", () => {
    const p = `/var/log/containers/web-5d8f_shop_nginx-${ID}.log`;
    expect(attributesOfPath(p)).toEqual({ "k8s.pod.name": "web-5d8f", "k8s.namespace.name": "shop", "k8s.container.name": "nginx", "container.id": ID });
    expect(containerIdOfPath(p)).toBe(ID);
  });
  test("kubelet pod directories carry the pod uid and restart count", () => {
    expect(attributesOfPath("/var/log/pods/shop_web-5d8f_0f5e2c1a-1111-2222-3333-444455556666/nginx/3.log")).toEqual({
      "k8s.namespace.name": "shop", "k8s.pod.name": "web-5d8f", "k8s.pod.uid": "0f5e2c1a-1111-2222-3333-444455556666",
      "k8s.container.name": "nginx", "k8s.container.restart_count": 3,
    });
  });
  test("docker json-file paths carry the container id", () => {
    expect(containerIdOfPath(`/var/lib/docker/containers/${ID}/${ID}-json.log`)).toBe(ID);
  });
  test("patterns split into a scan base and a relative glob", () => {
    expect(splitPattern("/var/log/containers/*.log")).toEqual({ base: "/var/log/containers", rest: "*.log" });
    expect(splitPattern("/var/log/pods/**/*.log")).toEqual({ base: "/var/log/pods", rest: "**/*.log" });
    expect(splitPattern("/var/log/app.log")).toEqual({ base: "/var/log", rest: "app.log" });
  });
});
