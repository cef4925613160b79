/*
 * ngx_stream_mruby: Ruby scripts in the access phase of stream (TCP/UDP)
 * servers, on the same core as the http module.
 */

#ifndef _NGX_STREAM_MRUBY_MODULE_H_INCLUDED_
#define _NGX_STREAM_MRUBY_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include <mruby.h>

#include "mrb_interp.h"
#include "mrb_script.h"
#include "ngx_mruby.h"


typedef struct {
    ngx_mruby_script_t   *handler;        /* mruby_stream(_code) */
} ngx_stream_mruby_srv_conf_t;


extern ngx_module_t       ngx_stream_mruby_module;
extern const mrb_server   ngx_stream_mruby_server;


#endif /* _NGX_STREAM_MRUBY_MODULE_H_INCLUDED_ */
