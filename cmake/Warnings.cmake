# dpinfer_set_warnings(target): the project's warning level, on its own targets only.
function(dpinfer_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor)
  if(DPINFER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
