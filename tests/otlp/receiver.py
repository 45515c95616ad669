"""A small OTLP/HTTP trace receiver for the tests: the official OpenTelemetry protobuf definitions
(`opentelemetry-proto`) decode what mcp-host exports, exactly as a collector's OTLP/HTTP receiver
would, and each span is written as one JSON line to stdout.

Usage: receiver.py  (prints `listening on <port>` first, then one line per span received)

It listens on 127.0.0.1 (an ephemeral port), accepts `POST /v1/traces` with
`Content-Type: application/x-protobuf` (and `application/json`, the other OTLP/HTTP encoding),
and answers with an `ExportTraceServiceResponse`, as the OTLP specification asks.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        try:
            if self.headers.get("Content-Type", "").startswith("application/json"):
                json_format.Parse(body, request)
            else:
                request.ParseFromString(body)
        except Exception as e:  # an undecodable export is a 400, as a collector answers
            self.send_error(400, f"not an ExportTraceServiceRequest: {e}")
            return
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "attributes": attributes(span.attributes),
                        "status_code": span.status.code,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                    }
                    sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    sys.stdout.write(f"listening on {server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
