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
AP_MRB_FINFO_INT(csize, f->csize)
AP_MRB_FINFO_INT(permission, f->protection)
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


static const mrb_api_method  ap_mrb_finfo_methods[] = {
    { "filetype", ap_mrb_finfo_filetype, MRB_ARGS_NONE() },
    { "size", ap_mrb_finfo_size, MRB_ARGS_NONE() },
    { "csize", ap_mrb_finfo_csize, MRB_ARGS_NONE() },
    { "permission", ap_mrb_finfo_permission, MRB_ARGS_NONE() },
    { "mode", ap_mrb_finfo_mode, MRB_ARGS_NONE() },
    { "user", ap_mrb_finfo_user, MRB_ARGS_NONE() },
    { "group", ap_mrb_finfo_group, MRB_ARGS_NONE() },
    { "inode", ap_mrb_finfo_inode, MRB_ARGS_NONE() },
    { "device", ap_mrb_finfo_device, MRB_ARGS_NONE() },
    { "nlink", ap_mrb_finfo_nlink, MRB_ARGS_NONE() },
    { "atime", ap_mrb_finfo_atime, MRB_ARGS_NONE() },
    { "mtime", ap_mrb_finfo_mtime, MRB_ARGS_NONE() },
    { "ctime", ap_mrb_finfo_ctime, MRB_ARGS_NONE() },
    { "fname", ap_mrb_finfo_fname, MRB_ARGS_NONE() },
    { "file?", ap_mrb_finfo_is_file, MRB_ARGS_NONE() },
    { "directory?", ap_mrb_finfo_is_directory, MRB_ARGS_NONE() },
    { "exist?", ap_mrb_finfo_exists, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


static const mrb_api_const  ap_mrb_finfo_types[] = {
    { "APR_NOFILE", APR_NOFILE },
    { "APR_REG", APR_REG },
    { "APR_DIR", APR_DIR },
    { "APR_CHR", APR_CHR },
    { "APR_BLK", APR_BLK },
    { "APR_PIPE", APR_PIPE },
    { "APR_LNK", APR_LNK },
    { "APR_SOCK", APR_SOCK },
    { "APR_UNKFILE", APR_UNKFILE },
    MRB_API_CONST_END
};


void
ap_mrb_define_finfo(mrb_state *mrb, struct RClass *apache)
{
    struct RClass  *c;

    c = mrb_api_define_class(mrb, apache, "Finfo", NULL, ap_mrb_finfo_methods);
    mrb_api_define_consts(mrb, c, ap_mrb_finfo_types);
}
