# The optional CUDA backend. MSTAR_CUDA=AUTO builds it when nvcc is found (on these machines at
# /usr/local/cuda); ON requires it; OFF never builds it. The runtime is linked statically so a
# binary built here runs on a GPU machine that has only the driver; the driver API is reached
# through cudaGetDriverEntryPoint, never by linking libcuda, so the library still loads on a
# machine without a driver (and then reports MSTAR_ENOTSUP).
set(MSTAR_HAVE_CUDA OFF)
if(NOT MSTAR_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(MSTAR_HAVE_CUDA ON)
  elseif(MSTAR_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MSTAR_CUDA=ON but no CUDA compiler was found (set CUDACXX or install CUDA)")
  endif()
endif()
message(STATUS "mstar: CUDA backend ${MSTAR_HAVE_CUDA}")

# Compile definitions and include paths for a target that has CUDA sources or calls cudart.
function(mstar_cuda_configure target)
  if(MSTAR_HAVE_CUDA)
    set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    # Sanitizer and fuzzer flags are host-compiler flags; nvcc must not see them.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fPIC>)
  endif()
endfunction()

# Link the static CUDA runtime into a final artifact.
function(mstar_cuda_link target)
  if(MSTAR_HAVE_CUDA)
    target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  endif()
endfunction()
