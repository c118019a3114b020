/**
 * SIGTERM and SIGINT for running workers (docs/client-spec.md point 6): one process listener
 * for all of them, installed while at least one runs with `handleSignals`, so many workers add
 * no listener each and the process's default (exit) is back once none runs.
 */

const stops = new Set<() => void>();

function fire(): void {
  for (const stop of [...stops]) stop();
}

/** Calls `stop` on SIGTERM or SIGINT until the returned function is called. */
export function onStopSignal(stop: () => void): () => void {
  if (stops.size === 0) {
    process.on("SIGTERM", fire);
    process.on("SIGINT", fire);
  }
  stops.add(stop);
  return () => {
    if (stops.delete(stop) && stops.size === 0) {
      process.off("SIGTERM", fire);
      process.off("SIGINT", fire);
    }
  };
}
