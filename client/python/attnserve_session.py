"""A streaming session that survives the loss of its replica, for Python clients of attnserve
behind a gateway (deploy/k8s/overlays/gateway, scripts/cluster.sh) or a single server.

The documented retry, as code:
  * every call about the session carries the header x-attnserve-session (the gateway routes by
    it to the replica that holds the session);
  * each append keeps its request until a result says `stored` (its state is in the session
    store: --checkpoint_every_appends=1 makes every acknowledged append stored);
  * when the stream fails with UNAVAILABLE (the replica died or drains, or the session is leased
    elsewhere and the lease has not expired yet), or CANCELLED that this client did not cause
    (HAProxy 2.6 resets the client's stream when its replica dies, and when a replica refuses a
    stream while the client is still sending), or ends without an answer, the session is resumed (a new
    stream with `session_id`, through the same address) until `retry_deadline_s`; StreamOpened
    says the last append the store holds, and the kept appends after it are sent again in
    order. Sequence numbers make this exact: an append the new replica has is answered from
    its stored results (`replayed`), one it lacks is applied.

A stream lives as long as the session is used: by default it has no deadline
(`call_timeout_s` sets one for each stream, after which its append fails with
DEADLINE_EXCEEDED, not retried).

The generated modules (attnserve.v1.inference_pb2 and _pb2_grpc) are passed in, so this file
works with the stubs a program generates for itself.

    session = ResumableSession(channel, pb, pb_grpc, model="mamba")
    result = session.append([1, 2, 3])        # an AppendResult
    session.close()
"""

import queue
import time

import grpc

SESSION_HEADER = "x-attnserve-session"
OWNER_TRAILER = "x-attnserve-session-owner"


class StreamEnded(Exception):
    """The server ended the stream with OK while an append waited (a drain's end): resume."""


def retryable(error):
    """Whether a failed session call should be retried on a resumed stream."""
    if isinstance(error, StreamEnded):
        return True
    if error.code() == grpc.StatusCode.UNAVAILABLE:
        return True
    # This client cancels only streams it no longer reads, so a CANCELLED it reads came from
    # the path: HAProxy resets a client's stream (RST_STREAM CANCEL) when the replica behind it
    # dies, and when a replica refuses a stream while the client is still sending (then with
    # the replica's x-attnserve-session-owner trailer).
    return error.code() == grpc.StatusCode.CANCELLED


class ResumableSession:
    def __init__(self, channel, pb, pb_grpc, model="auto", session_id="", retry_deadline_s=30.0,
                 call_timeout_s=None, output_kind=None):
        self.pb = pb
        self.stub = pb_grpc.AttnServeStub(channel)
        self.model = model
        self.session_id = session_id
        self.retry_deadline_s = retry_deadline_s
        self.call_timeout_s = call_timeout_s
        self.output_kind = output_kind if output_kind is not None else pb.OUTPUT_KIND_LAST_LOGITS
        self.next_sequence = 1
        self.kept = []            # (sequence number, StreamRequest) not yet known to be stored
        self.opened = None        # the last StreamOpened
        self.resumes = 0          # how many times the session was resumed after a failure
        self._requests = None
        self._responses = None
        self._call = None
        self._open(resume=bool(session_id))

    # ---- public ----

    def append(self, tokens, generate=None):
        """Appends `tokens` (and optionally a GenerateSpec) and returns the AppendResult,
        resuming the session elsewhere as often as needed within retry_deadline_s."""
        pb = self.pb
        seq = self.next_sequence
        self.next_sequence += 1
        a = pb.StreamAppend(sequence_number=seq, tokens=tokens,
                            output=pb.OutputSpec(kind=self.output_kind))
        if generate is not None:
            a.generate.CopyFrom(generate)
        request = pb.StreamRequest(append=a)
        self.kept.append((seq, request))
        deadline = time.monotonic() + self.retry_deadline_s
        while True:
            try:
                if self._responses is None:
                    self._resume(deadline, seq, request)
                    return self._collect(seq)
                self._requests.put(request)
                return self._collect(seq)
            except (grpc.RpcError, StreamEnded) as error:
                self._drop_stream()
                if not retryable(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self):
        """Ends the stream (the session stays on the server until its TTL or CloseSession)."""
        self._drop_stream()

    # ---- internals ----

    def _metadata(self):
        return [(SESSION_HEADER, self.session_id)] if self.session_id else []

    def _open(self, resume):
        pb = self.pb
        self._requests = queue.Queue()
        opening = pb.StreamOpen(session_id=self.session_id) if resume else \
            pb.StreamOpen(model=self.model)
        self._requests.put(pb.StreamRequest(open=opening))
        self._call = self.stub.Stream(iter(self._requests.get, None), timeout=self.call_timeout_s,
                                      metadata=self._metadata())
        self._responses = self._call
        first = next(self._responses, None)
        if first is None:
            raise StreamEnded()
        if first.WhichOneof("kind") != "opened":
            raise RuntimeError("the stream answered %s before opened" % first.WhichOneof("kind"))
        self.opened = first.opened
        self.session_id = first.opened.session_id

    def _resume(self, deadline, seq, request):
        """Resumes the session and sends again what the store lacks, and append `seq`
        (`request`) when the store has it already (its reply was lost: the result comes back
        replayed from the session's stored results)."""
        while True:
            try:
                self._open(resume=True)
                break
            except (grpc.RpcError, StreamEnded) as error:
                self._drop_stream()
                if not retryable(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.resumes += 1
        stored = self.opened.last_sequence_number
        self.kept = [(s, r) for s, r in self.kept if s > stored]
        if seq <= stored:
            self._requests.put(request)
        for _, kept in self.kept:
            self._requests.put(kept)
        # Results of the resent appends before the newest come first; _collect skips them.

    def _collect(self, seq):
        while True:
            response = next(self._responses, None)
            if response is None:
                raise StreamEnded()
            kind = response.WhichOneof("kind")
            if kind != "result":
                continue  # generated tokens, streamed before their result
            result = response.result
            if result.stored:
                self.kept = [(s, r) for s, r in self.kept if s > result.sequence_number]
            if result.sequence_number == seq:
                return result

    def _drop_stream(self):
        if self._requests is not None:
            self._requests.put(None)
        if self._call is not None:
            self._call.cancel()
        self._requests = self._responses = self._call = None
