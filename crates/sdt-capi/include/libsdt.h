/*
 * libsdt: USDT probes defined while the program runs.
 *
 * For JIT compilers, interpreters and plugin hosts whose probes are not
 * known when they are compiled. A provider's probes become an ELF shared
 * object in memory (a memfd), loaded into the process, with the notes and
 * semaphores <sys/sdt.h> gives compiled probes: `sdt list -p PID`,
 * `sdt trace`, `sdt run`, bpftrace, gdb and every other USDT reader see
 * them. This is the C interface of the Rust crate `sdt` (sdt::dynamic);
 * the library is built by `cargo build -p sdt-capi` as libsdt.so.
 *
 * Not <sys/sdt.h>: that header declares probes compiled into a program.
 *
 *     sdt_provider *p = sdt_provider_new("myjit");
 *     enum sdt_arg_type types[] = { SDT_ARG_U64, SDT_ARG_STR };
 *     sdt_provider_add_probe(p, "compiled", types, 2);
 *     sdt_provider_load(p);
 *     const sdt_probe *compiled = sdt_provider_probe(p, "compiled");
 *     uint64_t args[] = { address, (uintptr_t)"fib" };
 *     sdt_probe_fire(compiled, args, 2);
 *     sdt_provider_free(p);
 *
 * Functions that can fail return -1 or NULL; sdt_last_error() then says
 * why. A provider is not thread-safe while it is defined, loaded or
 * unloaded; its probes may be fired and tested from any thread.
 */
#ifndef LIBSDT_H
#define LIBSDT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A provider: a name and probes, loaded or not. */
typedef struct sdt_provider sdt_provider;
/* A probe of a loaded provider. */
typedef struct sdt_probe sdt_probe;

/* The types of probe arguments. Each takes one 64-bit slot of
 * sdt_probe_fire's array, but SDT_ARG_BYTES takes two: the address and
 * the length. A probe takes at most 12 slots. */
enum sdt_arg_type {
	SDT_ARG_U8 = 1,
	SDT_ARG_U16 = 2,
	SDT_ARG_U32 = 3,
	SDT_ARG_U64 = 4,
	SDT_ARG_I8 = 5,
	SDT_ARG_I16 = 6,
	SDT_ARG_I32 = 7,
	SDT_ARG_I64 = 8,
	SDT_ARG_PTR = 9,   /* an address */
	SDT_ARG_STR = 10,  /* the address of a NUL-terminated string */
	SDT_ARG_BYTES = 11 /* two slots: the address of bytes, their length */
};

/* A new provider with no probes; its name is a C identifier. */
sdt_provider *sdt_provider_new(const char *name);

/* Adds a probe, before the provider is loaded (or after it is unloaded). */
int sdt_provider_add_probe(sdt_provider *provider, const char *name,
			   const enum sdt_arg_type *types, size_t count);

/* Loads the provider's probes: from now on they can be traced and fired. */
int sdt_provider_load(sdt_provider *provider);

/* Unloads the probes; the provider can take more probes and be loaded
 * again. Probes of the provider must not be used after this. */
int sdt_provider_unload(sdt_provider *provider);

/* Unloads the probes if loaded, and frees the provider. NULL is ignored. */
void sdt_provider_free(sdt_provider *provider);

/* The probe `name` of a loaded provider, or NULL. Valid until the
 * provider is unloaded or freed. */
const sdt_probe *sdt_provider_probe(const sdt_provider *provider, const char *name);

/* 1 while a tracer has enabled the probe, else 0: one load from memory. */
int sdt_probe_enabled(const sdt_probe *probe);

/* Fires the probe with `count` argument slots if a tracer has enabled it.
 * Returns 0; -1 if it is enabled and `count` is not the number of slots
 * its arguments take (then nothing is fired). */
int sdt_probe_fire(const sdt_probe *probe, const uint64_t *slots, size_t count);

/* Why the last call that failed on this thread failed. */
const char *sdt_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* LIBSDT_H */
