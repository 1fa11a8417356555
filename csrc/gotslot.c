/*
 * The slot through which a loaded shared object calls a function it imports.
 *
 * A shared library calls another library's function through a pointer in its
 * global offset table, filled in by the dynamic loader: a JUMP_SLOT relocation
 * (a call through the PLT) or a GLOB_DAT one (built with -fno-plt). Finding
 * that relocation by the symbol's name gives the one pointer through which
 * this object, and no other, reaches the function; rewriting it changes what
 * this object calls and nothing else in the process.
 *
 * With BIND_NOW and RELRO (Debian's and manylinux's libibverbs both) the
 * loader fills every slot at load time and then makes the table read-only;
 * rs_slot_write() opens the page for the one store and closes it again, and
 * only where RELRO closed it: a page the loader left writable stays writable.
 *
 * Everything here reads what the loader has already laid out in memory and
 * makes raw system calls only: it runs inside a fork()'s prepare handler,
 * which may be a fork from a signal handler.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "arch.h"
#include "gotslot.h"
#include "mapwalk.h"

#if defined(__x86_64__)
#  define RS_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#  define RS_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#  define RS_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#  define RS_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

/* A pointer of the dynamic section. glibc rewrites these to run-time
 * addresses where the section is writable (x86-64, aarch64); a value still
 * below the load address is an offset the loader left as is. */
static uintptr_t dyn_ptr(const struct link_map *lm, ElfW(Addr) value)
{
    return value < lm->l_addr ? lm->l_addr + value : value;
}

/* The slot in a table of RELA relocations whose symbol is `name`. */
static void **find_in(const struct link_map *lm, const ElfW(Rela) *rel, size_t size,
                      const ElfW(Sym) *symtab, const char *strtab, const char *name)
{
    for (size_t i = 0; rel && i < size / sizeof *rel; i++) {
        unsigned long type = ELF64_R_TYPE(rel[i].r_info);
        unsigned long sym = ELF64_R_SYM(rel[i].r_info);
        if ((type != RS_R_JUMP_SLOT && type != RS_R_GLOB_DAT) || sym == 0)
            continue;
        if (strcmp(strtab + symtab[sym].st_name, name) == 0)
            return (void **)(lm->l_addr + rel[i].r_offset);
    }
    return NULL;
}

void **rs_slot_find(const struct link_map *lm, const char *name)
{
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprel_size = 0, rela_size = 0;
    int plt_is_rela = 1;
    if (!lm->l_ld)
        return NULL;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(lm, d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)dyn_ptr(lm, d->d_un.d_ptr); break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(lm, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: jmprel_size = d->d_un.d_val; break;
        case DT_PLTREL: plt_is_rela = d->d_un.d_val == DT_RELA; break;
        case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(lm, d->d_un.d_ptr); break;
        case DT_RELASZ: rela_size = d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab || !plt_is_rela)
        return NULL;  /* both architectures use RELA; anything else is not ours to read */
    void **slot = find_in(lm, jmprel, jmprel_size, symtab, strtab, name);
    return slot ? slot : find_in(lm, rela, rela_size, symtab, strtab, name);
}

/* The object's PT_GNU_RELRO segment as the loader protects it (whole pages
 * only: it rounds the segment's end down) and the extent of its PT_LOAD
 * segments: 0, or -1 for a layout we do not read. The ELF header sits at the
 * load address for every shared object whose first PT_LOAD maps the file's
 * start at address 0. */
struct layout {
    uintptr_t relro_lo, relro_hi, load_lo, load_hi;
};

static int read_layout(const struct link_map *lm, uintptr_t pagesize, struct layout *out)
{
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)lm->l_addr;
    if (lm->l_addr == 0 || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
        return -1;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(lm->l_addr + eh->e_phoff);
    int first_load_at_zero = 0;
    out->relro_lo = out->relro_hi = out->load_lo = out->load_hi = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD) {
            if (!first_load_at_zero) {
                first_load_at_zero = ph[i].p_offset == 0 && ph[i].p_vaddr == 0 ? 1 : -1;
                out->load_lo = lm->l_addr;
            }
            if (lm->l_addr + ph[i].p_vaddr + ph[i].p_memsz > out->load_hi)
                out->load_hi = lm->l_addr + ph[i].p_vaddr + ph[i].p_memsz;
        }
        if (ph[i].p_type == PT_GNU_RELRO) {
            out->relro_lo = (lm->l_addr + ph[i].p_vaddr) & ~(pagesize - 1);
            out->relro_hi = (lm->l_addr + ph[i].p_vaddr + ph[i].p_memsz) & ~(pagesize - 1);
        }
    }
    return first_load_at_zero == 1 ? 0 : -1;
}

struct perms_at {
    uintptr_t at;
    int found, writable;
};

static long find_perms(const struct rs_vma *m, void *ctx)
{
    struct perms_at *p = ctx;
    if (p->at < m->lo || p->at >= m->hi)
        return 0;
    p->found = 1;
    p->writable = m->perms[1] == 'w';
    return 1;
}

int rs_slot_relocated(const struct link_map *lm, void **slot)
{
    uintptr_t pagesize = getauxval(AT_PAGESZ);
    struct layout l;
    if (read_layout(lm, pagesize, &l) < 0)
        return 1;  /* rs_slot_write() leaves such an object alone anyway */
    if (l.relro_hi > l.relro_lo) {
        /* The loader makes RELRO read-only as the last step of relocating an
         * object, after glibc's r_state said RT_CONSISTENT (that comes once
         * the objects are mapped, before they are relocated). */
        struct perms_at p = { l.relro_lo, 0, 0 };
        return rs_map_walk("/proc/self/maps", find_perms, &p) >= 0 && p.found && !p.writable;
    }
    /* No page of RELRO: relocated once the slot holds neither the file's own
     * value (an offset into the object) nor an address inside it (a PLT stub
     * of lazy binding). */
    uintptr_t v = (uintptr_t)__atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return v >= l.load_hi - l.load_lo && !(v >= l.load_lo && v < l.load_hi);
}

int rs_slot_write(const struct link_map *lm, void **slot, void *value)
{
    uintptr_t pagesize = getauxval(AT_PAGESZ);
    uintptr_t page = (uintptr_t)slot & ~(pagesize - 1);
    struct layout l;
    long rc;
    if (read_layout(lm, pagesize, &l) < 0)
        return -ENOEXEC;  /* a layout we do not know: leave the object alone */
    int relro = page >= l.relro_lo && page < l.relro_hi;
    if (!relro) {
        __atomic_store_n(slot, value, __ATOMIC_RELEASE);
        return 0;
    }
    rc = rs_sys3(SYS_mprotect, (long)page, (long)pagesize, PROT_READ | PROT_WRITE);
    if (rc < 0)
        return (int)rc;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    rs_sys3(SYS_mprotect, (long)page, (long)pagesize, PROT_READ);
    return 0;
}
