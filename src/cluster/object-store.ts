// A watch's store by namespace then name, since a joined "namespace/name" key would be a new string per object.

/** Cluster-scoped objects use the '' namespace. */
export class ObjectStore<T> {
  private readonly byNamespace = new Map<string, Map<string, T>>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(namespace: string, name: string): T | undefined {
    return this.byNamespace.get(namespace)?.get(name);
  }

  set(namespace: string, name: string, value: T): void {
    let names = this.byNamespace.get(namespace);
    if (!names) {
      names = new Map();
      this.byNamespace.set(namespace, names);
    }
    const before = names.size;
    names.set(name, value);
    this.count += names.size - before;
  }

  delete(namespace: string, name: string): boolean {
    const names = this.byNamespace.get(namespace);
    if (!names?.delete(name)) return false;
    this.count--;
    if (names.size === 0) this.byNamespace.delete(namespace);
    return true;
  }

  clear(): void {
    this.byNamespace.clear();
    this.count = 0;
  }

  *values(): IterableIterator<T> {
    for (const names of this.byNamespace.values()) yield* names.values();
  }
}
