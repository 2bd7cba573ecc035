-- A task may carry its producer's trace context (W3C traceparent and tracestate, an X-Ray
-- trace header): claims, the task view and consumer records hand it back, so a worker's span
-- continues the producer's trace. Compact JSON text with the keys given of "tp", "ts" and
-- "x", copied verbatim into the warm tier's blob (logic/admission.task_blob: "tr"); NULL, as
-- for most tasks, costs nothing.
ALTER TABLE tierq_tasks ADD COLUMN trace text;
