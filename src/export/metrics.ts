// The /metrics registry: its collectors read one scrape taken per request, so a response describes one moment.
import { collectDefaultMetrics, Registry } from 'prom-client';

export interface RegistryOptions {
  /** Adds prom-client's process metrics (process_cpu_seconds_total, ...); off for golden tests. */
  processMetrics: boolean;
}

export interface MetricsCollector<S> {
  register(registry: Registry, scrape: () => S): void;
}

/** Takes the scrape once per metrics() call; prom-client runs every collect callback before its first await. */
class ScrapeRegistry<S> extends Registry {
  private current: S | undefined;
  constructor(private readonly take: () => S) {
    super();
  }
  scrape = (): S => {
    this.current ??= this.take();
    return this.current;
  };
  override async metrics(): Promise<string> {
    this.current = undefined;
    try {
      return await super.metrics();
    } finally {
      this.current = undefined;
    }
  }
}

export function createRegistry<S>(
  collectors: readonly MetricsCollector<S>[],
  take: () => S,
  opts: RegistryOptions,
): Registry {
  const registry = new ScrapeRegistry(take);
  for (const c of collectors) c.register(registry, registry.scrape);
  // The event-loop lag histogram samples every 100 ms rather than every 10 ms, to keep an idle agent idle.
  if (opts.processMetrics) collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 100 });
  return registry;
}
