/*
 * Apache::Finfo: what Apache knows of the file the request maps to
 * (r->finfo, filled when the request is mapped to storage).
 */

#include "ap_mrb.h"


static apr_finfo_t *
ap_mrb_finfo(mrb_state *mrb)
{
    return &ap_mrb_request(mrb)->finfo;
}


#define AP_MRB_FINFO_INT(name, expr)                                          \
    static mrb_value                                                          \
    ap_mrb_finfo_##name(mrb_state *mrb, mrb_value self)                       \
    {                                                                         \
        apr_finfo_t  *f = ap_mrb_finfo(mrb);                                  \
        return mrb_int_value(mrb, (mrb_int) (expr));                          \
    }

AP_MRB_FINFO_INT(filetype, f->filetype)
AP_MRB_FINFO_INT(size, f->size)
AP_MRB_FINFO_INT(user, f->user)
AP_MRB_FINFO_INT(group, f->group)
AP_MRB_FINFO_INT(inode, f->inode)
AP_MRB_FINFO_INT(device, f->device)
AP_MRB_FINFO_INT(nlink, f->nlink)
AP_MRB_FINFO_INT(atime, apr_time_sec(f->atime))
AP_MRB_FINFO_INT(mtime, apr_time_sec(f->mtime))
AP_MRB_FINFO_INT(ctime, apr_time_sec(f->ctime))


/* Permission bits as chmod(1) writes them: APR's own encoding differs. */
static mrb_value
ap_mrb_finfo_mode(mrb_state *mrb, mrb_value self)
{
    apr_fileperms_t  p = ap_mrb_finfo(mrb)->protection;
    mrb_int          mode;

    mode = ((p & 0x0700) >> 2) | ((p & 0x0070) >> 1) | (p & 0x0007);

    if (p & APR_USETID) {
        mode |= 04000;
    }
    if (p & APR_GSETID) {
        mode |= 02000;
    }
    if (p & APR_WSTICKY) {
        mode |= 01000;
    }

    return mrb_int_value(mrb, mode);
}


static mrb_value
ap_mrb_finfo_fname(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_mrb_finfo(mrb)->fname);
}


static mrb_value
ap_mrb_finfo_is_file(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_finfo(mrb)->filetype == APR_REG);
}


static mrb_value
ap_mrb_finfo_is_directory(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_finfo(mrb)->filetype == APR_DIR);
}


static mrb_value
ap_mrb_finfo_exists(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_finfo(mrb)->filetype != APR_NOFILE);
}


void
ap_mrb_define_finfo(mrb_state *mrb, struct RClass *apache)
{
    static const struct {
        const char  *name;
        mrb_func_t   fn;
    } methods[] = {
        { "filetype", ap_mrb_finfo_filetype },
        { "size", ap_mrb_finfo_size },
        { "mode", ap_mrb_finfo_mode },
        { "user", ap_mrb_finfo_user },
        { "group", ap_mrb_finfo_group },
        { "inode", ap_mrb_finfo_inode },
        { "device", ap_mrb_finfo_device },
        { "nlink", ap_mrb_finfo_nlink },
        { "atime", ap_mrb_finfo_atime },
        { "mtime", ap_mrb_finfo_mtime },
        { "ctime", ap_mrb_finfo_ctime },
        { "fname", ap_mrb_finfo_fname },
        { "file?", ap_mrb_finfo_is_file },
        { "directory?", ap_mrb_finfo_is_directory },
        { "exist?", ap_mrb_finfo_exists }
    };
    static const struct {
        const char  *name;
        mrb_int      value;
    } types[] = {
        { "APR_NOFILE", APR_NOFILE },
        { "APR_REG", APR_REG },
        { "APR_DIR", APR_DIR },
        { "APR_CHR", APR_CHR },
        { "APR_BLK", APR_BLK },
        { "APR_PIPE", APR_PIPE },
        { "APR_LNK", APR_LNK },
        { "APR_SOCK", APR_SOCK },
        { "APR_UNKFILE", APR_UNKFILE }
    };
    struct RClass  *c;
    size_t          i;

    c = mrb_define_class_under(mrb, apache, "Finfo", mrb->object_class);

    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        mrb_define_method(mrb, c, methods[i].name, methods[i].fn,
                          MRB_ARGS_NONE());
    }

    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        mrb_define_const(mrb, c, types[i].name,
                         mrb_int_value(mrb, types[i].value));
    }
}
